// The progress channel's tracker field (issue 40, item 6): {"tracker": {"wandb": "ID"}}.
#include <doctest/doctest.h>

#include <string>

#include "spendcap/guards/progress.hpp"

using namespace spendcap;

TEST_CASE("progress: a tracker line names the tracker's run id") {
  auto line = parse_progress_line(R"({"tracker":{"wandb":"1a2b3c"}})");
  REQUIRE(line);
  CHECK(line->tracker == "wandb:1a2b3c");
  auto two = parse_progress_line(R"({"step":3,"tracker":{"mlflow":"m1","wandb":"w1"}})");
  REQUIRE(two);
  CHECK(two->tracker == "mlflow:m1,wandb:w1");
  CHECK(two->step == 3);

  ProgressState state;
  state.apply(line, TimePoint{}, Money{});
  state.apply(parse_progress_line(R"({"step":4})"), TimePoint{}, Money{});
  CHECK(state.tracker == "wandb:1a2b3c");  // a line without one keeps the last
}

TEST_CASE("progress: a bad tracker makes the line bad") {
  CHECK_FALSE(parse_progress_line(R"({"tracker":"wandb:1"})"));
  CHECK_FALSE(parse_progress_line(R"({"tracker":{}})"));
  CHECK_FALSE(parse_progress_line(R"({"tracker":{"wandb":7}})"));
  CHECK_FALSE(parse_progress_line(R"({"tracker":{"W&B":"x"}})"));
  CHECK_FALSE(parse_progress_line(R"({"step":1,"tracker":{"wandb":"has space"}})"));
  CHECK_FALSE(parse_progress_line(R"({"tracker":{"wandb":"a,b"}})"));
  CHECK_FALSE(tracker_label("wandb", std::string(129, 'x')));
  CHECK(tracker_label("wandb", std::string(128, 'x')));
}

TEST_CASE("progress: a line's tracker labels are kept to whole labels within the tag's limit") {
  // Two labels of 161 bytes (the longest: a 32-byte name, ':', a 128-byte id) pass 256 together:
  // the first is kept whole, the second and any after it (a short one too) are dropped.
  std::string name(32, 'a'), id(128, 'x');
  std::string text =
      R"({"tracker":{")" + name + R"(":")" + id + R"(","b":")" + id + R"(","c":"short"}})";
  auto line = parse_progress_line(text);
  REQUIRE(line);  // still a good line: every label is valid
  CHECK(line->tracker == name + ":" + id);
  CHECK(line->tracker->size() <= kMaxTrackerBytes);
  auto fits = parse_progress_line(R"({"tracker":{"mlflow":"m1","wandb":"w1"}})");
  REQUIRE(fits);
  CHECK(fits->tracker == "mlflow:m1,wandb:w1");
  // A bad label after the limit still makes the line bad.
  CHECK_FALSE(parse_progress_line(R"({"tracker":{")" + name + R"(":")" + id + R"(","b":")" + id +
                                  R"(","c":"has space"}})"));
}

TEST_CASE("progress: the summary names a tracker reported alone, not 'no progress'") {
  ProgressState state;
  CHECK(progress_summary(state, "USD") == "progress: no progress reported yet");
  state.apply(parse_progress_line(R"({"tracker":{"mlflow":"m1"}})"), TimePoint{}, Money{});
  CHECK(progress_summary(state, "USD") == "progress: tracker mlflow:m1");
  state.apply(parse_progress_line(R"({"step":4,"total_steps":10})"), TimePoint{}, Money{});
  std::string both = progress_summary(state, "USD");
  CHECK(both.rfind("progress: step 4 of 10, ", 0) == 0);
  CHECK(both.find(", tracker mlflow:m1") != std::string::npos);
}
