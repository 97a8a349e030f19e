"""The JSON Schema of the policy (policies/policy.schema.json) against the examples and fixtures.

The C++ validator is the authority (`spendcap policy check`); the schema is what editors and CI
pipelines use, so it must accept every example in policies/ and every file in
tests/fixtures/policies/good, and reject every file in tests/fixtures/policies/bad. The unit tests
(tests/unit/test_policy.cpp) hold the same fixtures against the C++ validator, and check that the
schema's string patterns accept exactly what the validator accepts.
"""

import json
import pathlib
import unittest

import jsonschema  # Debian: python3-jsonschema (scripts/setup.sh installs it)

ROOT = pathlib.Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
SCHEMA_PATH = POLICIES / "policy.schema.json"
FIXTURES = ROOT / "tests" / "fixtures" / "policies"


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def object_schemas(node, where="#"):
    """Every subschema that describes an object's properties, with where it is."""
    if isinstance(node, dict):
        if "properties" in node:
            yield where, node
        for key, value in node.items():
            yield from object_schemas(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from object_schemas(value, f"{where}/{index}")


class PolicySchemaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schema = load(SCHEMA_PATH)
        cls.validator = jsonschema.Draft202012Validator(cls.schema)

    def errors(self, document):
        return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in self.validator.iter_errors(document)]

    def test_schema_is_draft_2020_12(self):
        self.assertEqual(self.schema["$schema"], "https://json-schema.org/draft/2020-12/schema")
        jsonschema.Draft202012Validator.check_schema(self.schema)

    def test_every_object_refuses_unknown_keys(self):
        found = 0
        for where, node in object_schemas(self.schema):
            if where.endswith("/if") or "/if/" in where or "/then" in where:
                continue  # conditions over the instance, not descriptions of an object
            found += 1
            with self.subTest(where=where):
                self.assertIs(node.get("additionalProperties"), False)
        self.assertGreater(found, 10)

    def test_examples_validate(self):
        examples = sorted(p for p in POLICIES.glob("*.json")
                          if not p.name.endswith(".schema.json"))
        self.assertGreaterEqual(len(examples), 2)
        for path in examples:
            with self.subTest(example=path.name):
                self.assertEqual(self.errors(load(path)), [])

    def test_good_fixtures_validate(self):
        files = sorted((FIXTURES / "good").glob("*.json"))
        self.assertTrue(files)
        for path in files:
            with self.subTest(fixture=path.name):
                self.assertEqual(self.errors(load(path)), [])

    def test_bad_fixtures_are_rejected(self):
        files = sorted((FIXTURES / "bad").glob("*.json"))
        self.assertTrue(files)
        for path in files:
            with self.subTest(fixture=path.name):
                self.assertNotEqual(self.errors(load(path)), [],
                                    f"{path.name} should be rejected by the schema")

    def test_expected_lists_every_bad_fixture_once(self):
        lines = (FIXTURES / "bad" / "EXPECTED.txt").read_text(encoding="utf-8").splitlines()
        names = []
        for line in filter(None, lines):
            fields = line.split("\t")
            with self.subTest(line=line):
                self.assertEqual(len(fields), 3, "FILENAME<TAB>JSON-PATH<TAB>substring")
                self.assertTrue(fields[1].startswith("/"), "a JSON path")
                self.assertTrue(fields[2], "a substring of the message")
            names.append(fields[0])
        self.assertEqual(sorted(names), sorted(p.name for p in (FIXTURES / "bad").glob("*.json")))
        self.assertEqual(len(names), len(set(names)))

    def test_the_schema_can_fail(self):
        # Negative control: a document the schema must reject, built here, not read from a file.
        self.assertTrue(self.errors({"budgets": {"team": {"vision": {"amount": -1}}}}))
        self.assertTrue(self.errors({"webhooks": [{"url": "https://hooks.example/x"}]}))


if __name__ == "__main__":
    unittest.main()
