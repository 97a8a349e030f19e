// The checkpoint watch as a part of the run (run_part.hpp): during the grace, the file named in
// $SPENDCAP_CHECKPOINT_DONE appearing ends it early (KillPath::checkpoint_done). An inotify watch
// on the file's directory, started when the grace is armed; a checkpoint already written ends the
// grace at once. Called from the event loop only.
#pragma once

#include <array>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "spendcap/supervise/kill_path.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace spendcap {

class CheckpointWatch final : public RunPart {
 public:
  // `done_path` "": nothing is watched.
  CheckpointWatch(boost::asio::io_context& io, std::string done_path, KillPath& kill_path);
  ~CheckpointWatch() override { close(); }

  // The grace is armed: watch until it ends.
  void watch();
  void on_launched(TimePoint) override {}
  void on_finish() override { close(); }

 private:
  void read();
  bool written();
  void close();
  void unwatch();

  boost::asio::io_context& io_;
  std::string done_path_;
  KillPath& kill_path_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> inotify_;
  int watch_ = -1;  // the directory's watch in inotify_
  std::array<char, 4096> buffer_{};
};

}  // namespace spendcap
