// Checkpoint storage (--checkpoint-dir, --checkpoint-max-gb): a RunPart that samples the
// directory's size when the command starts and then every interval (a minute; shorter only for
// tests), and hands each size to the meter, which charges it at the policy's storage price per
// GB-month. The walk is bounded: it visits at most kStorageWalkLimit entries, follows no links
// and counts regular files by their size (st_size from lstat: the bytes an object store bills;
// a sparse file counts its full length). A GB is 2^30 bytes, as the clouds bill storage.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class Meter;
class Reporter;
class RunPart;

inline constexpr std::uint64_t kStorageWalkLimit = 100000;
inline constexpr double kBytesPerGb = 1024.0 * 1024.0 * 1024.0;

struct StoragePlan {
  std::string dir;  // "": no storage charged
  double max_gb = 0;
  Money per_gb_month;
  Money rate_per_hour;  // the maximum's share of the run's allocated rate
  Nanos interval = std::chrono::minutes(1);
};

struct DirectorySize {
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
  bool capped = false;  // stopped after `limit` entries: the size is a lower bound
  std::string error;    // the directory itself could not be read
};

// The size of the regular files under `dir`, without following links.
DirectorySize directory_size(const std::string& dir, std::uint64_t limit = kStorageWalkLimit);

std::unique_ptr<RunPart> make_storage_part(boost::asio::io_context& io, const Reporter& reporter,
                                           Meter& meter, const StoragePlan& plan);

}  // namespace spendcap
