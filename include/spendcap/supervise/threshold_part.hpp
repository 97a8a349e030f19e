// Warnings as the run's own spend crosses the thresholds of its budget (RunTerms::warn_at), as a
// part of the run (run_part.hpp): each at its computed moment, none once the run shuts down.
// Called from the event loop only.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "spendcap/base/money.hpp"
#include "spendcap/notify/notifier.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class Meter;
class Reporter;

// "79% of the run budget spent: $0.3163 of $0.4000": the percentage is the figures' own ratio at
// the moment printed, not the threshold crossed (a heartbeat can cross several at once).
std::string spent_of(Money spent, Money budget, const std::string& what,
                     const std::string& currency);

std::unique_ptr<RunPart> make_threshold_part(boost::asio::io_context& io, const Reporter& reporter,
                                             const Meter& meter, const RunTerms& terms,
                                             Notifier& notifier);

}  // namespace spendcap
