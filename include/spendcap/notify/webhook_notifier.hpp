// WebhookNotifier: the Notifier of a run with webhooks. notify() builds the payload and queues one
// delivery per webhook that wants the event; a thread of its own delivers them in order
// (delivery.hpp: signed, retried, bounded). At exit finish() waits at most the delivery deadline
// and hands back what is left, which the caller spools in the ledger's outbox. Outbox entries found
// at the start of a run are queued first (resend) and reported back by finish() as delivered or
// failed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/delivery.hpp"
#include "spendcap/notify/notifier.hpp"
#include "spendcap/notify/payload.hpp"

namespace spendcap {

struct PendingDelivery {
  WebhookTarget target;
  std::string event_id, event, body;
  std::int64_t outbox_id = 0;  // > 0: an outbox entry being flushed
  std::string last_error;
};

struct NotifierLeftovers {
  std::vector<PendingDelivery> undelivered;  // new events: spool them
  std::vector<std::int64_t> outbox_delivered;
  std::vector<std::pair<std::int64_t, std::string>> outbox_failed;  // id, why
};

class WebhookNotifier final : public Notifier {
 public:
  // `report` prints a line (already redacted); it is called from the notifier's thread.
  WebhookNotifier(RunFacts facts, std::vector<WebhookTarget> targets,
                  std::unique_ptr<HttpClient> http, Nanos deadline,
                  std::function<void(const std::string&)> report);
  ~WebhookNotifier() override;
  WebhookNotifier(const WebhookNotifier&) = delete;
  WebhookNotifier& operator=(const WebhookNotifier&) = delete;

  void notify(const RunEvent& event) override;
  void resend(const OutboxEntry& entry, WebhookTarget target);
  // Starts the delivery thread. `spendcap run` calls it once the guard is forked (the guard must
  // be forked while spendcap has one thread).
  void start();
  // An outbox entry delivered (2xx) before this notifier started whose removal from the outbox
  // failed: kept, so that it is removed before the run's final row (acks) and at finish().
  void owe_ack(std::int64_t outbox_id);
  // The delivered outbox entries not removed yet (owe_ack, resend).
  std::vector<std::int64_t> acks() const;
  // Waits at most `wait` for the queue to empty, stops, then waits for an attempt still in flight
  // to end (at most kAttemptTimeout + kAttemptSlack: its outcome decides whether the event is
  // spooled), and returns what is left. Only an attempt that outlives even that is abandoned (its
  // thread is detached) and spooled as undelivered.
  NotifierLeftovers finish(Nanos wait);

  Nanos deadline() const { return deadline_; }

 private:
  struct State;
  RunFacts facts_;
  std::vector<WebhookTarget> targets_;
  Nanos deadline_;
  std::shared_ptr<State> state_;
};

// The outbox entry for a delivery that was not made, or nullopt when its destination would put a
// credential in the ledger (a --webhook URL with userinfo or a secret path).
std::optional<OutboxEntry> outbox_entry_for(const PendingDelivery& delivery,
                                            const std::string& run_id, const std::string& user);

}  // namespace spendcap
