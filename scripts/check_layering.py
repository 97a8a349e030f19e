#!/usr/bin/env python3
"""The layering check (CTest `layering`): every #include "spendcap/<area>/..." in src/, include/
and tests/unit/ must name an area that the including file's library may use.

The allowed edges are the CMake link dependencies and nothing else: CMakeLists.txt writes them at
configure time into build/layering.txt (see spendcap_write_layering there), one line per library:

    area <name> <folder> public=<areas> private=<areas>
    program <name> <file> public= private=<areas>
    tests <name> <folder> public= private=<areas>

A file belongs to the library whose folder (under src/, include/spendcap/ or tests/unit/) is the
longest prefix of its path. It may include the headers of its own area and of everything its area
links, following only PUBLIC links below the first step (a PRIVATE dependency of a library is not
handed on to its users); a header, which its area's users include, only what the area links
PUBLIC. A test's local helpers (fakes/, test_support.hpp) are checked as part of each test that
includes them.

    check_layering.py --map build/layering.txt --root .     # the check
    check_layering.py --negative-control                     # proves the check can fail

One rule more: the setuid-root spendcap-runner links only the areas in ROOT_IMAGE (what runs as
root); the front and the supervisor's adoption (shared_runner/) and everything above stay out.
"""

import argparse
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc")
# The setuid runner's image and the areas it may link (with what they link PUBLIC).
ROOT_IMAGE = ("spendcap-runner", {"process", "base"})


def read_map(path):
    units = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            kind, name, folder, *deps = line.split()
            edges = {"public": [], "private": []}
            for dep in deps:
                key, _, value = dep.partition("=")
                if key not in edges:
                    sys.exit(f"check_layering: {path}:{number}: unknown field {key!r}")
                edges[key] = [v for v in value.split(",") if v]
            units.append({"kind": kind, "name": name, "folder": folder, **edges})
    return units


class Layering:
    def __init__(self, units):
        self.units = units
        self.by_name = {u["name"]: u for u in units}
        self.areas = [u for u in units if u["kind"] == "area"]

    def public_closure(self, name, seen=None):
        seen = set() if seen is None else seen
        if name in seen or name not in self.by_name:
            return seen
        seen.add(name)
        for dep in self.by_name[name]["public"]:
            self.public_closure(dep, seen)
        return seen

    def allowed(self, name, header):
        unit = self.by_name[name]
        allowed = self.public_closure(name)
        if not header:
            for dep in unit["private"]:
                allowed |= self.public_closure(dep)
        return allowed

    def area_of(self, rel):
        """The area whose folder (or file stem) is the longest prefix of `rel` (under src/,
        include/spendcap/), or None."""
        stem = os.path.splitext(rel)[0]
        best = None
        for area in self.areas:
            folder = area["folder"]
            if rel.startswith(folder + "/") or stem == folder:
                if best is None or len(folder) > len(best["folder"]):
                    best = area
        return best["name"] if best else None

    def unit_of_test(self, rel):
        """The tests unit whose folder holds `rel` (under tests/unit/)."""
        for unit in self.units:
            if unit["kind"] == "tests" and rel.startswith(unit["folder"] + "/"):
                return unit["name"]
        return None


def includes(path):
    with open(path, errors="replace") as f:
        text = f.read()
    for match in INCLUDE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1)


def walk(root, top):
    base = os.path.join(root, top)
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                full = os.path.join(dirpath, name)
                yield full, os.path.relpath(full, base).replace(os.sep, "/")


def check_root_image(layering):
    name, allowed = ROOT_IMAGE
    if name not in layering.by_name:
        return []
    linked = set()
    for dep in layering.by_name[name]["private"]:
        linked |= layering.public_closure(dep)
    extra = sorted(linked - allowed)
    return [f"{name} links {', '.join(extra)}: the setuid runner may link only "
            f"{', '.join(sorted(allowed))} (what runs as root)"] if extra else []


def check(root, layering):
    problems = check_root_image(layering)

    def check_file(path, shown, unit, header, local_dirs, seen):
        allowed = layering.allowed(unit, header)
        for line, target in includes(path):
            if target.startswith("spendcap/"):
                area = layering.area_of(target[len("spendcap/"):])
                if area is None:
                    problems.append(f"{shown}:{line}: includes \"{target}\", which no area's "
                                    "folder holds (add the area in CMakeLists.txt)")
                elif area not in allowed:
                    uses = ", ".join(sorted(allowed - {unit})) or "nothing"
                    problems.append(
                        f"{shown}:{line}: includes \"{target}\" of area {area}, which {unit} may "
                        f"not use ({unit} uses: {uses}; the edges are the target_link_libraries "
                        "in CMakeLists.txt and tests/CMakeLists.txt)")
                continue
            # A test's own helpers: checked as part of the test that includes them.
            for local in local_dirs:
                candidate = os.path.normpath(os.path.join(local, target))
                if os.path.isfile(candidate):
                    if candidate not in seen:
                        seen.add(candidate)
                        check_file(candidate, f"{shown} -> {target}", unit, header, local_dirs, seen)
                    break

    for top, kind in (("src", "src"), ("include/spendcap", "include"), ("tests/unit", "tests")):
        for path, rel in walk(root, top):
            shown = f"{top}/{rel}"
            if kind == "tests":
                if "/" not in rel or rel.startswith("fakes/"):
                    continue  # shared helpers and fakes: checked through the tests that use them
                unit = layering.unit_of_test(rel)
                if unit is None:
                    problems.append(f"{shown}: no unit-test binary builds this folder "
                                    "(tests/CMakeLists.txt builds one per tests/unit/<area>/)")
                    continue
                local_dirs = [os.path.dirname(path), os.path.join(root, "tests/unit")]
                check_file(path, shown, unit, False, local_dirs, set())
                continue
            if kind == "src" and rel == "main.cpp":
                unit = "spendcap"
            else:
                unit = layering.area_of(rel)
            if unit is None:
                problems.append(f"{shown}: in no area's folder (add the area in CMakeLists.txt)")
                continue
            check_file(path, shown, unit, kind == "include", [], set())
    return problems


def negative_control():
    """A synthetic tree with one allowed and one upward include: the check must report exactly the
    upward one, and nothing on the same tree without it."""
    files = {
        "include/spendcap/base/low.hpp": "#pragma once\n",
        "include/spendcap/cli/high.hpp": '#pragma once\n#include "spendcap/base/low.hpp"\n',
        "src/base/low.cpp": '#include "spendcap/base/low.hpp"\n',
        "src/cli/high.cpp": '#include "spendcap/cli/high.hpp"\n#include "spendcap/base/low.hpp"\n',
        "tests/unit/base/test_low.cpp": '#include "spendcap/base/low.hpp"\n#include "helper.hpp"\n',
        "tests/unit/base/helper.hpp": "#pragma once\n",
    }
    bad = {"src/base/bad.cpp": '#include "spendcap/base/low.hpp"\n#include "spendcap/cli/high.hpp"\n',
           "tests/unit/base/helper.hpp": '#pragma once\n#include "spendcap/cli/high.hpp"\n'}
    layering = Layering([
        {"kind": "area", "name": "base", "folder": "base", "public": [], "private": []},
        {"kind": "area", "name": "cli", "folder": "cli", "public": ["base"], "private": []},
        {"kind": "tests", "name": "unit_base", "folder": "base", "public": [], "private": ["base"]},
    ])
    with tempfile.TemporaryDirectory(prefix="spendcap-layering-") as root:
        def write(tree):
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
        write(files)
        clean = check(root, layering)
        write(bad)
        found = check(root, layering)
    ok = True
    if clean:
        print("negative control: the good tree was reported:", *clean, sep="\n  ")
        ok = False
    expected = ["src/base/bad.cpp:2:", "tests/unit/base/helper.hpp:2:",
                "tests/unit/base/test_low.cpp -> helper.hpp:2:"]
    for prefix in expected:
        if not any(p.startswith(prefix) and "area cli, which" in p for p in found):
            print(f"negative control: no report starting {prefix!r}; got:", *found, sep="\n  ")
            ok = False
    if len(found) != len(expected):
        print(f"negative control: expected exactly {len(expected)} reports, got:", *found,
              sep="\n  ")
        ok = False
    if ok:
        print("negative control: the upward includes were reported:", *found, sep="\n  ")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--map", help="build/layering.txt, written by CMake")
    parser.add_argument("--root", default=".", help="the source tree")
    parser.add_argument("--negative-control", action="store_true")
    args = parser.parse_args()
    if args.negative_control:
        return 0 if negative_control() else 1
    if not args.map:
        parser.error("--map is required")
    layering = Layering(read_map(args.map))
    problems = check(args.root, layering)
    for problem in problems:
        print(f"spendcap layering: {problem}")
    if problems:
        print(f"spendcap layering: {len(problems)} include(s) cross the layers "
              "(fix the include, or add the dependency where it belongs)")
        return 1
    counted = sum(1 for top in ("src", "include/spendcap", "tests/unit") for _ in walk(args.root, top))
    print(f"spendcap layering: the includes of {counted} files stay within their areas' "
          f"link dependencies ({len(layering.areas)} areas)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
