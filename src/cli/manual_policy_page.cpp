// spendcap-policy(5): the policy file's page, from the key table (manual.hpp).
#include <cctype>

#include "manual_blocks.hpp"
#include "spendcap/cli/manual.hpp"
#include "spendcap/policy/key_docs.hpp"
#include "spendcap/policy/keys.hpp"

namespace spendcap {

using manual_blocks::code;
using manual_blocks::item;
using manual_blocks::paragraph;

ManPage policy_file_page() {
  ManPage page{"spendcap-policy", 5, "the spendcap policy file", {}};
  page.sections.push_back(
      {"SYNOPSIS",
       {code("--policy FILE\n$SPENDCAP_POLICY\n./spendcap.json\n"
             "$XDG_CONFIG_HOME/spendcap/policy.json\n/etc/spendcap/policy.json")}});
  page.sections.push_back(
      {"DESCRIPTION",
       {paragraph("A policy is a JSON file that says what things cost (rates per GPU and "
                  "instance type), how runs are priced and stopped (defaults), how much each "
                  "team, experiment, project and user may spend (budgets), which runaway "
                  "guards are on, and which webhooks are told. The policy in effect is the "
                  "first file found in the order of the SYNOPSIS; the run flags are laid over "
                  "it. Objects merge key by key, webhook lists are appended, any other value is "
                  "replaced, and the merged document is validated as a whole."),
        paragraph("Plain JSON, no comments (use description). Unknown keys are errors at every "
                  "level, and so is a key written twice. Durations are strings as on the "
                  "command line (\"90s\", \"5m\", \"1h30m\", \"250ms\"); money is a JSON number "
                  "in the policy's currency, kept to the micro-unit; counts are positive "
                  "integers; signals are \"SIGUSR1\", \"USR1\", a number or \"none\". spendcap "
                  "policy check FILE names each error by its JSON path."),
        paragraph("A /etc/spendcap/policy.json with \"locked\": true always loads first and "
                  "every other layer may only tighten it: each key's rule is under KEYS. Where "
                  "the locked policy leaves a key out, its built-in default is what is locked "
                  "(said under each key). A locked policy refuses to load when anyone but "
                  "its owner can write it or its directory.")}});
  ManSection keys{"KEYS", {}};
  keys.blocks.push_back(
      paragraph("Every key, by its JSON path (* stands for any name: a GPU "
                "type, a team), with its type, default, the rule for a layer "
                "over a locked policy, and the run flag that sets it."));
  for (const PolicyKey& key : policy_keys()) {
    const PolicyKeyDoc* doc = find_policy_key_doc(key.path);
    std::string text;
    if (doc && !doc->meaning.empty()) {
      text = doc->meaning + ". ";
      text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
    }
    text += "Type: " + (doc ? doc->type : std::string("see spendcap policy keys")) + ".";
    std::string default_value = doc ? doc->default_value : "";
    if (!key.default_value.is_null()) {
      default_value = key.default_value.is_string()
                          ? "\"" + key.default_value.get<std::string>() + "\""
                          : key.default_value.dump();
      if (key.implied == Implied::with_parent) default_value += " where the guard is on";
    }
    if (key.required) default_value = "required";
    if (!default_value.empty()) text += " Default: " + default_value + ".";
    std::string rule;
    switch (key.tightening) {
      case Tightening::by_key:
        rule = "each key by its own rule";
        break;
      case Tightening::any:
        rule = "a layer may set anything";
        break;
      case Tightening::ignore:
        rule = "a layer's value is ignored: only the system file locks";
        break;
      case Tightening::same:
        rule = "may not be changed";
        break;
      case Tightening::same_present:
        rule = "may not be changed, nor added where the locked policy has none";
        break;
      case Tightening::at_most:
        rule = "may only be lowered (a " + key.note + " value is refused)";
        break;
      case Tightening::at_least:
        rule = "may only be raised (a " + key.note + " value is refused)";
        break;
      case Tightening::enforce_kept:
        rule = "enforce may not become warn";
        break;
      case Tightening::signal_kept:
        rule = "may change, but not to none";
        break;
      case Tightening::pid_kept:
        rule = "pid may not become none";
        break;
      case Tightening::on_kept:
        rule = "true (on) may not become false";
        break;
    }
    if ((key.tightening == Tightening::same || key.tightening == Tightening::same_present) &&
        !key.note.empty()) {
      rule += ": " + key.note;
    }
    text += " Locked: " + rule + ".";
    if (key.implied != Implied::no && !key.default_value.is_null()) {
      text += " A locked policy enforces the default when it does not write the key down" +
              std::string(key.implied == Implied::with_parent ? " but turns the guard on." : ".");
    }
    if (!key.flag.empty()) text += " Flag: " + key.flag + ".";
    if (!key.no_effect_yet.empty()) {
      text += " Accepted but without effect yet (" + key.no_effect_yet +
              "); refused in a locked policy.";
    }
    keys.blocks.push_back(item(key.path, text));
  }
  page.sections.push_back(keys);
  page.sections.push_back(
      {"EXAMPLES",
       {paragraph("A lab's policy: prices, a team budget with members, a guard, a webhook."),
        code("{\n"
             "  \"rates\": {\"gpu\": {\"a100-80gb\": {\"on_demand\": 4.10, \"spot\": 1.60}}},\n"
             "  \"defaults\": {\"gpu\": \"a100-80gb\", \"grace\": \"2m\"},\n"
             "  \"budgets\": {\"team\": {\"vision\": {\"amount\": 2000, \"period\": \"month\",\n"
             "                                    \"members\": {\"unix_groups\": "
             "[\"vision\"]}}}},\n"
             "  \"guards\": {\"stall\": {\"after\": \"20m\"}},\n"
             "  \"webhooks\": [{\"url_env\": \"TEAM_HOOK\", \"format\": \"slack\"}]\n"
             "}"),
        paragraph("Check it, then see what a run would be charged to:"),
        code("spendcap policy check spendcap.json\nspendcap budgets --policy spendcap.json")}});
  page.sections.push_back(
      {"FILES",
       {item("/etc/spendcap/policy.json", "the host's policy; locked on a shared runner"),
        item("/usr/share/doc/spendcap/policies/", "example policies and the JSON Schema")}});
  page.sections.push_back(
      {"SEE ALSO", {paragraph("spendcap(1), spendcap-policy(1), spendcap-budgets(1)")}});
  return page;
}

}  // namespace spendcap
