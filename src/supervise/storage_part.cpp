#include "spendcap/supervise/storage_part.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace spendcap {

namespace asio = boost::asio;

DirectorySize directory_size(const std::string& dir, std::uint64_t limit) {
  DirectorySize size;
  std::vector<std::string> pending{dir};
  bool first = true;
  while (!pending.empty()) {
    std::string path = std::move(pending.back());
    pending.pop_back();
    // O_NOFOLLOW | O_DIRECTORY: a link to a directory is not walked into.
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (first) size.error = std::strerror(errno);
      first = false;
      continue;
    }
    first = false;
    DIR* stream = ::fdopendir(fd);
    if (!stream) {
      ::close(fd);
      continue;
    }
    while (dirent* entry = ::readdir(stream)) {
      if (!std::strcmp(entry->d_name, ".") || !std::strcmp(entry->d_name, "..")) continue;
      if (size.entries >= limit) {
        size.capped = true;
        break;
      }
      size.entries++;
      struct stat st {};
      if (::fstatat(::dirfd(stream), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (S_ISREG(st.st_mode)) {
        size.bytes += static_cast<std::uint64_t>(st.st_size);
      } else if (S_ISDIR(st.st_mode)) {
        pending.push_back(path + "/" + entry->d_name);
      }
    }
    ::closedir(stream);
    if (size.capped) break;
  }
  return size;
}

namespace {

std::string gb_text(double gb) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f", gb);
  return text;
}

class StoragePart final : public RunPart {
 public:
  StoragePart(asio::io_context& io, const Reporter& reporter, Meter& meter, const StoragePlan& plan)
      : timer_(io), reporter_(reporter), meter_(meter), plan_(plan) {}

  void on_launched(TimePoint) override { sample(); }
  void on_finish() override {
    timer_.cancel();
    finished_ = true;
  }

 private:
  void sample() {
    if (finished_) return;
    DirectorySize size = directory_size(plan_.dir);
    if (!size.error.empty()) {
      if (!said_error_) {
        reporter_.error("--checkpoint-dir " + plan_.dir + ": " + size.error +
                        "; its size is not measured until it can be read");
      }
      said_error_ = true;
    } else {
      double gb = static_cast<double>(size.bytes) / kBytesPerGb;
      meter_.storage_sampled(now(), gb);
      if (size.capped && !said_capped_) {
        said_capped_ = true;
        reporter_.error("--checkpoint-dir " + plan_.dir + ": more than " +
                        std::to_string(kStorageWalkLimit) +
                        " entries; its size is counted from the first " +
                        std::to_string(kStorageWalkLimit) + " only");
      }
      if (gb > plan_.max_gb && !said_over_) {
        said_over_ = true;
        reporter_.error("--checkpoint-dir " + plan_.dir + " holds " + gb_text(gb) +
                        " GB, over --checkpoint-max-gb " + gb_text(plan_.max_gb) + ": charged as " +
                        gb_text(plan_.max_gb) + " GB, the maximum the budget allowed for");
      }
    }
    timer_.expires_after(plan_.interval);
    timer_.async_wait([this](auto error) {
      if (!error) sample();
    });
  }

  asio::steady_timer timer_;
  const Reporter& reporter_;
  Meter& meter_;
  const StoragePlan& plan_;
  bool finished_ = false, said_error_ = false, said_capped_ = false, said_over_ = false;
};

}  // namespace

std::unique_ptr<RunPart> make_storage_part(asio::io_context& io, const Reporter& reporter,
                                           Meter& meter, const StoragePlan& plan) {
  return std::make_unique<StoragePart>(io, reporter, meter, plan);
}

}  // namespace spendcap
