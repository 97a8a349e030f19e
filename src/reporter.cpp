#include "spendcap/reporter.hpp"

#include <unistd.h>

#include <cerrno>

namespace spendcap {

namespace {
void write_all(const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed: nothing else to do
    p += n;
    left -= static_cast<size_t>(n);
  }
}
}  // namespace

Reporter::Reporter(bool quiet, bool title)
    : quiet_(quiet), title_(title), tty_(::isatty(STDERR_FILENO) == 1) {}

Reporter::~Reporter() {
  if (title_pushed_) write_all("\033[23;0t");  // pop the title saved by the first title()
}

void Reporter::write_line(const std::string& text) const {
  write_all((tty_ ? "\r\033[K" : "") + std::string("spendcap: ") + text + "\n");
}

void Reporter::line(const std::string& text) const {
  if (!quiet_) write_line(text);
}

void Reporter::error(const std::string& text) const {
  write_line(text);
}

void Reporter::title(const std::string& text) {
  if (!title_ || !tty_ || quiet_) return;
  std::string sequence;
  if (!title_pushed_) {
    sequence = "\033[22;0t";  // push the current title, restored on exit
    title_pushed_ = true;
  }
  write_all(sequence + "\033]0;" + text + "\007");
}

}  // namespace spendcap
