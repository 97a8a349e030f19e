#include <doctest/doctest.h>

#include "spendcap/base/error.hpp"
#include "spendcap/integrations/spot_notice.hpp"

using namespace spendcap;
using namespace std::chrono_literals;

TEST_CASE("parse_http_url: host, port and path of a plain http URL") {
  HttpUrl url = parse_http_url("http://169.254.169.254", "--spot-notice-url");
  CHECK(url.host == "169.254.169.254");
  CHECK(url.port == 80);
  CHECK(url.path == "/");
  url = parse_http_url("http://127.0.0.1:8080/notice?x=1", "--spot-notice");
  CHECK(url.host == "127.0.0.1");
  CHECK(url.port == 8080);
  CHECK(url.path == "/notice?x=1");
  CHECK_THROWS_AS(parse_http_url("https://169.254.169.254", "--x"), Error);
  CHECK_THROWS_AS(parse_http_url("http://:80/", "--x"), Error);
  CHECK_THROWS_AS(parse_http_url("http://h:99999/", "--x"), Error);
  CHECK_THROWS_AS(parse_http_url("http://h:80x/", "--x"), Error);
  CHECK_THROWS_AS(parse_http_url("http://user@h/", "--x"), Error);
  CHECK_THROWS_AS(parse_http_url("http://h/a b", "--x"), Error);
}

TEST_CASE("parse_spot_notice: aws, gcp and URL with their notice windows") {
  SpotNotice aws = parse_spot_notice("aws", "");
  CHECK(aws.cloud == SpotCloud::aws);
  CHECK(aws.window == 120s);
  CHECK(aws.base.host == "169.254.169.254");
  SpotNotice gcp = parse_spot_notice("gcp", "http://127.0.0.1:9000/base");
  CHECK(gcp.cloud == SpotCloud::gcp);
  CHECK(gcp.window == 30s);
  CHECK(gcp.base.port == 9000);
  CHECK(gcp.base.path == "/base");
  SpotNotice url = parse_spot_notice("http://10.0.0.1/preempt", "");
  CHECK(url.cloud == SpotCloud::url);
  CHECK(url.base.path == "/preempt");
  CHECK_THROWS_AS(parse_spot_notice("azure", ""), Error);
  CHECK_THROWS_AS(parse_spot_notice("aws", "ftp://x"), Error);
}

TEST_CASE("preemption_times: the grace fits the notice window, never longer than the trip's") {
  ShutdownTimes on_trip{60s, 10s}, on_signal{15s, 5s};
  // GCP: 30 s - 5 s kill-after - 1 s reaping - 10 s for the final row = 14 s.
  ShutdownTimes gcp = preemption_times(parse_spot_notice("gcp", ""), on_trip, on_signal);
  CHECK(gcp.grace == 14s);
  CHECK(gcp.kill_after == 5s);
  CHECK(gcp.total() + 10s <= 30s);
  // AWS: two minutes leave room for the whole 60 s grace.
  ShutdownTimes aws = preemption_times(parse_spot_notice("aws", ""), on_trip, on_signal);
  CHECK(aws.grace == 60s);
  CHECK(aws.total() <= 120s);
  // A short --grace stays short.
  CHECK(preemption_times(parse_spot_notice("aws", ""), {5s, 10s}, on_signal).grace == 5s);
  // A kill-after that eats the whole window leaves no grace, never a negative one.
  CHECK(preemption_times(parse_spot_notice("gcp", ""), on_trip, {15s, 40s}).grace == 0s);
}
