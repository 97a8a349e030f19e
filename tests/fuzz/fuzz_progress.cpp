// Fuzzes the progress channel's reader: any bytes as what a job appended to $SPENDCAP_PROGRESS,
// fed in two pieces (a read may end mid-line) through the line splitter (bounded: an oversized
// line is dropped, never held), each line parsed and folded into the run's progress state, and
// the costs and summary computed from it. A bad line is counted; nothing may crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "spendcap/guards/progress.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  spendcap::ProgressLines lines(4096);
  spendcap::ProgressState state;
  std::size_t cut = size / 2;
  for (std::string_view piece : {bytes.substr(0, cut), bytes.substr(cut)}) {
    for (const std::string& line : lines.feed(piece)) {
      if (line.size() > 4096) std::abort();  // the splitter's bound
      state.apply(spendcap::parse_progress_line(line), spendcap::TimePoint{},
                  spendcap::Money{1'000'000});
    }
  }
  (void)spendcap::cost_per_step(state);
  (void)spendcap::cost_per_thousand_units(state);
  (void)spendcap::projected_total(state);
  (void)spendcap::progress_summary(state, "USD");
  return 0;
}
