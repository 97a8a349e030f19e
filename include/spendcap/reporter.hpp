// What spendcap prints while a job runs. The job owns the terminal: spendcap prints milestone lines
// only (start, thresholds, trip, end) on stderr, each in one write(2) so it never interleaves
// inside the job's own output; on a terminal each line first clears the current line ("\r\e[K"),
// as tqdm.write does, so a progress bar is redrawn below instead of garbled. Live figures go to the
// terminal title with --title (pushed and popped with the xterm title stack), never to a
// refreshing line. --quiet prints errors only.
#pragma once

#include <string>

namespace spendcap {

class Reporter {
 public:
  Reporter(bool quiet, bool title);
  ~Reporter();

  // "spendcap: TEXT" unless quiet.
  void line(const std::string& text) const;
  // "spendcap: TEXT", always.
  void error(const std::string& text) const;
  // The terminal title, when --title was given and stderr is a terminal.
  void title(const std::string& text);
  bool title_enabled() const { return title_ && tty_ && !quiet_; }

 private:
  void write_line(const std::string& text) const;

  bool quiet_;
  bool title_;
  bool tty_;
  bool title_pushed_ = false;
};

}  // namespace spendcap
