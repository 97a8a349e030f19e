#include "spendcap/notify/webhook_notifier.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "spendcap/base/process_end.hpp"

namespace spendcap {

// Shared with the thread, which may outlive the notifier when an attempt is abandoned at exit.
struct WebhookNotifier::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<PendingDelivery> queue;
  bool busy = false;  // a delivery is in progress: `current`
  PendingDelivery current;
  bool stopping = false;  // finish(): no new attempt starts
  NotifierLeftovers done;
  std::unique_ptr<HttpClient> http;
  Nanos deadline{};
  std::function<void(const std::string&)> report;
  std::thread thread;

  void loop() {
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [this] { return stopping || !queue.empty(); });
      if (stopping) return;
      PendingDelivery delivery = std::move(queue.front());
      queue.pop_front();
      busy = true;
      current = delivery;
      lock.unlock();
      DeliveryResult result = spendcap::deliver(
          *http, delivery.target, delivery.event_id, delivery.body, deadline, [this](Nanos wait) {
            std::unique_lock sleeping(mutex);
            return !changed.wait_for(sleeping, wait, [this] { return stopping; });
          });
      lock.lock();
      busy = false;
      if (result.delivered) {
        if (delivery.outbox_id > 0) done.outbox_delivered.push_back(delivery.outbox_id);
      } else {
        std::string why = result.error + " after " + std::to_string(result.attempts) +
                          (result.attempts == 1 ? " attempt" : " attempts");
        if (delivery.outbox_id > 0) {
          done.outbox_failed.emplace_back(delivery.outbox_id, why);
        } else {
          delivery.last_error = why;
          // Only what may pass later is kept: a 400 will be a 400 tomorrow too.
          if (result.retryable) done.undelivered.push_back(delivery);
        }
        // Not once finish() has returned: whoever prints may be gone.
        if (report && !stopping) {
          report("webhook " + delivery.target.display() + ": " + delivery.event +
                 " event not delivered: " + why +
                 (result.retryable || delivery.outbox_id > 0 ? "" : " (not retried)"));
        }
      }
      changed.notify_all();
    }
  }
};

WebhookNotifier::WebhookNotifier(RunFacts facts, std::vector<WebhookTarget> targets,
                                 std::unique_ptr<HttpClient> http, Nanos deadline,
                                 std::function<void(const std::string&)> report)
    : facts_(std::move(facts)),
      targets_(std::move(targets)),
      deadline_(deadline),
      state_(std::make_shared<State>()) {
  state_->http = std::move(http);
  state_->deadline = deadline;
  state_->report = std::move(report);
}

WebhookNotifier::~WebhookNotifier() {
  if (state_->thread.joinable()) finish(Nanos{0});
}

void WebhookNotifier::start() {
  if (state_->thread.joinable()) return;
  std::shared_ptr<State> state = state_;
  state_->thread = std::thread([state] { state->loop(); });
}

void WebhookNotifier::notify(const RunEvent& event) {
  std::vector<const WebhookTarget*> wanted;
  for (const WebhookTarget& target : targets_) {
    if (target.wants(event.event)) wanted.push_back(&target);
  }
  if (wanted.empty()) return;
  std::string id = new_event_id();
  nlohmann::json payload = event_payload(facts_, event, id, unix_now());
  std::lock_guard lock(state_->mutex);
  if (state_->stopping) return;
  for (const WebhookTarget* target : wanted) {
    state_->queue.push_back(
        PendingDelivery{*target, id, event.event, event_body(target->format, payload), 0, ""});
  }
  state_->changed.notify_all();
}

void WebhookNotifier::resend(const OutboxEntry& entry, WebhookTarget target) {
  std::lock_guard lock(state_->mutex);
  state_->queue.push_back(
      PendingDelivery{std::move(target), entry.event_id, entry.event, entry.body, entry.id, ""});
  state_->changed.notify_all();
}

void WebhookNotifier::owe_ack(std::int64_t outbox_id) {
  std::lock_guard lock(state_->mutex);
  state_->done.outbox_delivered.push_back(outbox_id);
}

std::vector<std::int64_t> WebhookNotifier::acks() const {
  std::lock_guard lock(state_->mutex);
  return state_->done.outbox_delivered;
}

NotifierLeftovers WebhookNotifier::finish(Nanos wait) {
  std::unique_lock lock(state_->mutex);
  auto idle = [this] { return state_->queue.empty() && !state_->busy; };
  if (state_->thread.joinable()) state_->changed.wait_for(lock, wait, idle);
  state_->stopping = true;
  state_->changed.notify_all();
  // An attempt in flight is waited for to its end (its own timeout bounds it; no retry starts
  // once stopping): abandoned, a delivery whose receiver answered 2xx just after would be spooled
  // and sent again (issue 33).
  if (state_->thread.joinable()) {
    state_->changed.wait_for(lock, kAttemptTimeout + kAttemptSlack,
                             [this] { return !state_->busy; });
  }
  NotifierLeftovers left = std::move(state_->done);
  state_->done = {};
  for (PendingDelivery& delivery : state_->queue) {
    if (delivery.last_error.empty()) delivery.last_error = "not delivered before spendcap exited";
    if (delivery.outbox_id > 0) {
      left.outbox_failed.emplace_back(delivery.outbox_id, delivery.last_error);
    } else {
      left.undelivered.push_back(std::move(delivery));
    }
  }
  state_->queue.clear();
  bool busy = state_->busy;
  if (busy && state_->current.outbox_id == 0) {
    PendingDelivery abandoned = state_->current;
    abandoned.last_error = "no answer before spendcap exited";
    left.undelivered.push_back(std::move(abandoned));
  } else if (busy) {
    left.outbox_failed.emplace_back(state_->current.outbox_id, "no answer before spendcap exited");
  }
  lock.unlock();
  if (state_->thread.joinable()) {
    // An attempt still in flight past its own timeout (libcurl stuck beyond it): spendcap does not
    // wait for it (its event is spooled above as well: receivers drop a duplicate by its id).
    if (busy) {
      state_->thread.detach();
      note_abandoned_thread();  // still in libcurl: no finalisers at exit (base/process_end.hpp)
    } else {
      state_->thread.join();
    }
  }
  return left;
}

std::optional<OutboxEntry> outbox_entry_for(const PendingDelivery& delivery,
                                            const std::string& run_id, const std::string& user) {
  const WebhookTarget& target = delivery.target;
  if (target.destination.rfind("url:", 0) == 0 && redact_url(target.url) != target.url) {
    return std::nullopt;
  }
  OutboxEntry entry;
  entry.event_id = delivery.event_id;
  entry.event = delivery.event;
  entry.run_id = run_id;
  entry.user = user;
  entry.destination = target.destination;
  entry.format = target.format;
  entry.secret_env = target.secret_env;
  entry.body = delivery.body;
  entry.last_error = delivery.last_error;
  return entry;
}

}  // namespace spendcap
