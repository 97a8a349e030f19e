// --spot-notice: polls the cloud's instance metadata for a termination notice and, when one comes,
// starts the kill path as a preemption with a grace that fits the notice window.
//
//   aws: PUT /latest/api/token (IMDSv2), then GET /latest/meta-data/spot/instance-action with the
//        token: 404 = no notice, 200 = the instance is stopped or terminated in 2 minutes.
//   gcp: GET /computeMetadata/v1/instance/preempted with Metadata-Flavor: Google: "TRUE" once the
//        VM is preempted; it is stopped 30 seconds after.
//   URL: GET that URL: a 200 whose body is neither empty nor "false" is a notice (30 s assumed).
//
// The base URL (default http://169.254.169.254) comes from --spot-notice-url or
// $SPENDCAP_SPOT_METADATA_URL, so tests play the endpoint with a local server. The poll runs on a
// thread of its own (blocking HTTP with a deadline); it only posts the notice to the event loop, so
// it never delays the kill path, and on_finish() cancels a request in flight at once.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "spendcap/base/duration.hpp"
#include "spendcap/integrations/http_get.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace spendcap {

enum class SpotCloud { aws, gcp, url };

struct SpotNotice {
  SpotCloud cloud = SpotCloud::aws;
  HttpUrl base;              // aws, gcp: the metadata server; url: the endpoint itself
  Nanos window{};            // from the notice to the machine's end: aws 120 s, gcp and url 30 s
  Nanos poll_interval;       // AWS asks for every 5 s
  std::string name() const;  // "aws", "gcp", "url"
};

// `--spot-notice VALUE` with the base URL override (--spot-notice-url, else the environment's
// SPENDCAP_SPOT_METADATA_URL, may be empty). Throws Error naming the flag.
SpotNotice parse_spot_notice(const std::string& value, const std::string& base_override);

// The shutdown times for a notice: the trip's grace, shortened so that grace + kill-after + a
// margin for the final row fits in the window; kill-after as for a signal.
ShutdownTimes preemption_times(const SpotNotice& notice, const ShutdownTimes& on_trip,
                               const ShutdownTimes& on_signal);

// One look at the endpoint: the notice's text when there is one, nullopt when there is none or
// the endpoint did not answer (then `error` says why). `token` carries the IMDSv2 token between
// calls (fetched when empty, dropped on a 401).
std::optional<std::string> check_spot_notice(const SpotNotice& notice, std::string& token,
                                             int cancel_fd, std::string& error);

// The run part that polls from launch until the run stops.
PreemptionPartFactory spot_notice_part(SpotNotice notice);

}  // namespace spendcap
