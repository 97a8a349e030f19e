#include "spendcap/supervise/title_part.hpp"

#include <boost/asio/steady_timer.hpp>
#include <string>

#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace asio = boost::asio;

namespace spendcap {

namespace {

class Title final : public RunPart {
 public:
  Title(asio::io_context& io, Reporter& reporter, const Meter& meter, const RunTerms& terms)
      : timer_(io), reporter_(reporter), meter_(meter), plan_(terms) {}
  void on_launched(TimePoint) override { update(); }
  void on_finish() override {
    finished_ = true;
    timer_.cancel();
  }

 private:
  void update() {
    if (finished_ || !reporter_.title_enabled()) return;
    Money spend = meter_.spend_at(now());
    std::string text = "spendcap " + format_money(spend, plan_.currency);
    if (plan_.run_budget) text += " / " + format_money(*plan_.run_budget, plan_.currency);
    reporter_.title(text);
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) update();
    });
  }

  asio::steady_timer timer_;
  Reporter& reporter_;
  const Meter& meter_;
  const RunTerms& plan_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<RunPart> make_title_part(asio::io_context& io, Reporter& reporter,
                                         const Meter& meter, const RunTerms& terms) {
  return std::make_unique<Title>(io, reporter, meter, terms);
}

}  // namespace spendcap
