// The terminal title (--title) as a part of the run (run_part.hpp): the spend, and the run's
// budget, every interval. Called from the event loop only.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class Meter;
class Reporter;

std::unique_ptr<RunPart> make_title_part(boost::asio::io_context& io, Reporter& reporter,
                                         const Meter& meter, const RunTerms& terms);

}  // namespace spendcap
