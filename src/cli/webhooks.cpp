#include "spendcap/cli/webhooks.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"

#include <unistd.h>
#include <algorithm>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/notify/curl_http.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/run_notifier.hpp"

namespace spendcap {

namespace {

// Between attempts of a command (flush, test): a plain sleep on the caller's thread.
bool sleep_for(Nanos wait) {
  std::this_thread::sleep_for(wait);
  return true;
}

std::string destination_display(const std::string& destination) {
  if (destination.rfind("env:", 0) == 0) return "$" + destination.substr(4);
  if (destination.rfind("url:", 0) == 0) return redact_url(destination.substr(4));
  if (destination.rfind("file:", 0) == 0) return destination;
  return "?";
}

}  // namespace

int outbox_list_command(const LedgerChoice& choice, bool json) {
  std::unique_ptr<Ledger> ledger = open_ledger_session(for_reading(choice)).ledger;
  // Root (the runner's administrator) lists every user's entries, each with its user; a user
  // lists their own. Flushing stays per user: the URL and secret are in the user's environment.
  const bool everyone = ::geteuid() == 0;
  std::vector<OutboxEntry> entries = ledger->outbox(everyone ? "" : user_name());
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const OutboxEntry& e : entries) {
      list.push_back({{"id", e.id},
                      {"event_id", e.event_id},
                      {"event", e.event},
                      {"run_id", e.run_id},
                      {"user", e.user},
                      {"destination", destination_display(e.destination)},
                      {"format", e.format},
                      {"signed", !e.secret_env.empty()},
                      {"created_at", e.created_at},
                      {"attempts", e.attempts},
                      {"last_error", e.last_error}});
    }
    std::cout << dump_json(list, 2) << "\n";
    return 0;
  }
  if (entries.empty()) {
    std::cout << "outbox empty\n";
    return 0;
  }
  for (const OutboxEntry& e : entries) {
    std::cout << escape_for_terminal(
                     std::to_string(e.id) + "  " + format_utc(e.created_at, UtcForm::clock_z) +
                     "  " + e.event + "  run " + e.run_id.substr(0, 8) + "  to " +
                     destination_display(e.destination) + "  attempts " +
                     std::to_string(e.attempts) + (everyone ? "  user " + e.user : "") +
                     (e.last_error.empty() ? "" : "  last error: " + e.last_error))
              << "\n";
  }
  return 0;
}

int outbox_flush_command(const LedgerChoice& choice) {
  LedgerSession session = open_ledger_session(choice);
  // The write a writing verb owes the host first (ledger_session.hpp).
  settle_host_debts(session);
  std::unique_ptr<Ledger>& ledger = session.ledger;
  Environment env = current_environment();
  std::vector<OutboxEntry> entries = ledger->outbox(user_name());
  auto sendable = resolvable_outbox(entries, env);
  size_t elsewhere = entries.size() - sendable.size();
  // Claimed first, for as long as sending them all may take: a run or another flush that is
  // sending one of them now keeps it (issue 33).
  std::vector<std::int64_t> ids;
  for (const auto& [entry, target] : sendable) ids.push_back(entry.id);
  std::vector<std::int64_t> claimed = ledger->claim_outbox(
      ids, "", kOutboxClaimHold + kDefaultDeliveryDeadline * static_cast<int>(ids.size()));
  size_t busy = sendable.size();
  std::erase_if(sendable, [&claimed](const auto& item) {
    return std::find(claimed.begin(), claimed.end(), item.first.id) == claimed.end();
  });
  busy -= sendable.size();
  int failed = 0;
  if (!sendable.empty()) {
    std::unique_ptr<HttpClient> http = make_curl_http();
    for (auto& [entry, target] : sendable) {
      DeliveryResult result =
          deliver(*http, target, entry.event_id, entry.body, kDefaultDeliveryDeadline, sleep_for);
      std::string line = std::to_string(entry.id) + " " + entry.event + " to " + target.display();
      if (result.delivered) {
        // Delivered: the entry must go, else the next spendcap sends it again once the claim
        // ends (issue 33). One more try after the ledger's own retries; the claim still holds.
        bool removed = false;
        for (int attempt = 1; !removed; ++attempt) {
          try {
            ledger->remove_outbox(entry.id);
            removed = true;
          } catch (const Error& error) {
            if (attempt == 2) {
              ++failed;
              std::cout << escape_for_terminal(line +
                                               ": delivered, but not removed from the "
                                               "outbox (it may be sent again): " +
                                               format_error(error))
                        << "\n";
              break;
            }
          }
        }
        if (removed) std::cout << escape_for_terminal(line + ": delivered") << "\n";
      } else {
        ++failed;
        ledger->note_outbox_failure(entry.id, result.error);
        std::cout << escape_for_terminal(line + ": not delivered: " + result.error) << "\n";
      }
    }
  }
  if (busy > 0) {
    std::cout << busy << " entr" << (busy == 1 ? "y is" : "ies are")
              << " being sent by another spendcap now\n";
  }
  if (elsewhere > 0) {
    std::cout << elsewhere << " entr" << (elsewhere == 1 ? "y" : "ies")
              << " left: their webhook variables (or signing secrets) are not set here\n";
  }
  if (entries.empty()) std::cout << "outbox empty\n";
  return failed == 0 ? 0 : 1;
}

int notify_test_command(const NotifyTestRequest& request) {
  Environment env = current_environment();
  nlohmann::json flags = nlohmann::json::object();
  for (const std::string& name : request.webhook_envs) {
    flags["webhooks"].push_back({{"url_env", name}});
  }
  LoadedPolicy loaded = load_policy(PolicySearch::from_environment(request.policy),
                                    PolicyLayer{"command line", flags});
  std::vector<WebhookTarget> targets =
      run_webhook_targets(loaded.policy, request.webhook_urls, env, loaded.locked_policy);
  if (targets.empty()) {
    throw Error("notify test", "no webhook is configured",
                "add one to the policy's \"webhooks\", or give --webhook-env NAME");
  }
  RunFacts facts;
  facts.id = "00000000-0000-4000-8000-000000000000";
  facts.user = user_name();
  facts.host = host_name();
  facts.currency = loaded.policy.currency;
  RunEvent event{"test", "test", "", "a test event from spendcap notify test", std::nullopt};
  std::unique_ptr<HttpClient> http = make_curl_http();
  int failed = 0;
  for (const WebhookTarget& target : targets) {
    std::string id = new_event_id();
    std::string body = event_body(
        target.format, event_payload(facts, event, id, static_cast<double>(std::time(nullptr))));
    DeliveryResult result = deliver(*http, target, id, body, kDefaultDeliveryDeadline, sleep_for);
    std::string line = "webhook " + target.display() + " (" + target.format +
                       (target.secret.empty() ? "" : ", signed") + "): ";
    if (result.delivered) {
      line += "delivered";
    } else {
      ++failed;
      line += "not delivered: " + result.error;
    }
    std::cout << escape_for_terminal(line) << "\n";
  }
  return failed == 0 ? 0 : 1;
}

namespace {

struct OutboxArgs {
  LedgerChoice choice;
  bool json = false;
};

VerbRun add_outbox(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<OutboxArgs>();
  CLI::App* outbox = &command;
  outbox->require_subcommand(1);
  CLI::App* outbox_list = outbox->add_subcommand("list", "your undelivered webhook events");
  add_ledger_options(*outbox_list, args->choice);
  outbox_list->add_flag("--json", args->json, "print JSON");
  CLI::App* outbox_flush =
      outbox->add_subcommand("flush", "send your events whose webhook variables are set here");
  add_ledger_options(*outbox_flush, args->choice);
  return [args, outbox_list, outbox_flush] {
    if (*outbox_list) return outbox_list_command(args->choice, args->json);
    if (*outbox_flush) return outbox_flush_command(args->choice);
    return to_int(ExitCode::internal);
  };
}

VerbRun add_notify(CLI::App& command, CLI::App&, VerbContext&) {
  auto notify_request = std::make_shared<NotifyTestRequest>();
  CLI::App* notify = &command;
  notify->require_subcommand(1);
  CLI::App* notify_test =
      notify->add_subcommand("test", "send a test event to every configured webhook");
  notify_test->add_option("--policy", notify_request->policy,
                          "policy file (default: the search order in spendcap-policy(5))");
  notify_test->add_option("--webhook-env", notify_request->webhook_envs,
                          "also a webhook whose URL is in this variable (repeatable)");
  notify_test->add_option("--webhook", notify_request->webhook_urls, "also this URL (repeatable)");
  return [notify_request, notify_test] {
    if (*notify_test) return notify_test_command(*notify_request);
    return to_int(ExitCode::internal);
  };
}

}  // namespace

const Verb kOutboxVerb = {"outbox", "webhook events not delivered yet", add_outbox};
const Verb kNotifyVerb = {"notify", "webhooks", add_notify};

}  // namespace spendcap
