#include "spendcap/base/command_redaction.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace spendcap {

namespace {

std::vector<std::string> words_of(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// "scheme://user:pass@host" -> "scheme://user:***@host", every URL in `text`.
void redact_userinfo(std::string& text) {
  for (std::size_t at = text.find("://"); at != std::string::npos; at = text.find("://", at + 3)) {
    std::size_t start = at + 3;
    std::size_t end = text.find_first_of("/?# \t", start);
    if (end == std::string::npos) end = text.size();
    std::size_t sign = text.rfind('@', end);
    if (sign == std::string::npos || sign < start) continue;
    std::size_t colon = text.find(':', start);
    if (colon == std::string::npos || colon > sign) {
      // A user alone can be a token too (https://TOKEN@github.com/...).
      if (sign > start) text.replace(start, sign - start, kRedacted);
      continue;
    }
    text.replace(colon + 1, sign - colon - 1, kRedacted);
  }
}

// "?token=VALUE&x=1" -> "?token=***&x=1": query parameters that name a secret.
void redact_query(std::string& text) {
  for (std::size_t at = text.find_first_of("?&"); at != std::string::npos;
       at = text.find_first_of("?&", at + 1)) {
    std::size_t equals = text.find('=', at + 1);
    if (equals == std::string::npos) break;
    std::string_view name(text.data() + at + 1, equals - at - 1);
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char)) continue;
    if (!names_secret(name)) continue;
    std::size_t end = text.find_first_of("&# \t", equals + 1);
    if (end == std::string::npos) end = text.size();
    text.replace(equals + 1, end - equals - 1, kRedacted);
  }
}

bool is_token_char(char c, bool dashes) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (dashes && c == '-');
}

// A token format that says what it is, wherever it stands: its prefix, the characters that may
// follow it, and how many at least (short prefixes need long tails, or "sk-learn" would go).
struct TokenFormat {
  std::string_view prefix;
  bool dashes;  // whether '-' continues the token
  std::size_t min_tail;
};
constexpr TokenFormat kTokenFormats[] = {
    {"ghp_", false, 20},  {"gho_", false, 20}, {"ghu_", false, 20},
    {"ghs_", false, 20},  {"ghr_", false, 20}, {"github_pat_", false, 20},  // GitHub
    {"glpat-", true, 20}, {"gldt-", true, 20}, {"glrt-", true, 20},         // GitLab
    {"xoxb-", true, 10},  {"xoxp-", true, 10}, {"xoxa-", true, 10},
    {"xoxr-", true, 10},  {"xoxs-", true, 10}, {"xapp-", true, 10},  // Slack
    {"sk-", true, 20},                          // OpenAI, Anthropic (sk-ant-...)
    {"hf_", false, 20},                         // Hugging Face
    {"AKIA", false, 16},  {"ASIA", false, 16},  // AWS access key ids
};

// "ghp_abc...xyz" -> "ghp_***" wherever a known token format starts a word in `text`.
void redact_tokens(std::string& text) {
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (at > 0 && is_token_char(text[at - 1], true)) continue;  // inside a word
    for (const TokenFormat& format : kTokenFormats) {
      if (text.compare(at, format.prefix.size(), format.prefix) != 0) continue;
      std::size_t tail = at + format.prefix.size();
      std::size_t end = tail;
      while (end < text.size() && is_token_char(text[end], format.dashes)) ++end;
      if (end - tail < format.min_tail) continue;
      text.replace(tail, end - tail, kRedacted);
      at = tail + kRedacted.size() - 1;
      break;
    }
  }
}

std::string_view program_name(std::string_view word) {
  std::size_t slash = word.rfind('/');
  if (slash != std::string_view::npos) word.remove_prefix(slash + 1);
  return word;
}

// The tools that take a password glued to -p ("mysql -pVALUE"; sshpass also "-p VALUE").
bool takes_glued_password(std::string_view word) {
  word = program_name(word);
  static const std::set<std::string_view> kTools = {
      "mysql",     "mysqldump", "mysqladmin", "mysqlimport",  "mysqlcheck",    "mysqlshow",
      "mysqlpump", "mysqlsh",   "mariadb",    "mariadb-dump", "mariadb-admin", "sshpass"};
  return kTools.count(word) > 0;
}

// Within one argument, words after such a tool ("bash -c 'mysql -uroot -ps3cret db'").
void redact_glued_passwords(std::string& text, bool& after_tool) {
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find_first_of(" \t\n;|&", at);
    if (end == std::string::npos) end = text.size();
    std::string_view word(text.data() + at, end - at);
    if (takes_glued_password(word)) {
      after_tool = true;
    } else if (after_tool && word.size() > 2 && word.starts_with("-p") && word != "-p***") {
      text.replace(at + 2, end - at - 2, kRedacted);
      end = at + 2 + kRedacted.size();
    }
    at = end + 1;
  }
}

}  // namespace

bool names_secret(std::string_view name) {
  static const std::set<std::string> kSecretWords = {
      "password", "passwd",     "pass",        "pwd",           "secret", "token",
      "auth",     "credential", "credentials", "authorization", "apikey", "passphrase"};
  static const std::set<std::string> kKeyPrefixes = {"api",  "access",  "private",    "secret",
                                                     "auth", "signing", "encryption", "client"};
  // Where a secret is, not the secret: "--token-file", "PASSWORD_ENV".
  static const std::set<std::string> kPlaces = {"file", "path", "dir", "env", "name", "id", "type"};
  std::vector<std::string> words = words_of(name);
  if (words.empty() || kPlaces.count(words.back())) return false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (kSecretWords.count(words[i])) return true;
    if (words[i] == "key" && i > 0 && kKeyPrefixes.count(words[i - 1])) return true;
  }
  return false;
}

std::vector<std::string> redact_command(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  bool value_is_secret = false;  // the previous argument was "--token" without a value
  bool after_tool = false;       // a tool of takes_glued_password came earlier
  bool after_sshpass = false;    // "sshpass -p VALUE": the value is the next argument
  for (const std::string& arg : argv) {
    if (after_sshpass && arg == "-p") {
      out.push_back(arg);
      value_is_secret = true;
      continue;
    }
    if (value_is_secret && !arg.starts_with("-")) {
      out.emplace_back(kRedacted);
      value_is_secret = false;
      continue;
    }
    value_is_secret = false;
    std::string text = arg;
    std::size_t dashes = text.find_first_not_of('-');
    std::size_t equals = text.find('=');
    std::size_t colon = text.find(':');
    if (dashes != std::string::npos && dashes > 0 && dashes <= 2) {
      // An option: --name=value, or --name and its value next.
      std::string_view name(text.data() + dashes,
                            (equals == std::string::npos ? text.size() : equals) - dashes);
      if (std::all_of(name.begin(), name.end(), is_name_char) && names_secret(name)) {
        if (equals == std::string::npos) {
          value_is_secret = true;
        } else {
          text = text.substr(0, equals + 1) + std::string(kRedacted);
        }
      }
    } else if (equals != std::string::npos && equals > 0 && dashes == 0) {
      // An assignment, as env(1) and shells take them: NAME=value.
      std::string_view name(text.data(), equals);
      if (std::all_of(name.begin(), name.end(), is_name_char) && names_secret(name)) {
        text = text.substr(0, equals + 1) + std::string(kRedacted);
      }
    } else if (colon != std::string::npos && colon > 0 && dashes == 0) {
      // A header, as curl -H takes it: "Authorization: Bearer value".
      std::string_view name(text.data(), colon);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      if (!name.empty() && std::all_of(name.begin(), name.end(), is_name_char) &&
          names_secret(name)) {
        text = text.substr(0, colon + 1) + " " + std::string(kRedacted);
      }
    }
    redact_userinfo(text);
    redact_query(text);
    redact_tokens(text);
    redact_glued_passwords(text, after_tool);
    if (program_name(arg) == "sshpass") after_sshpass = true;
    out.push_back(std::move(text));
  }
  return out;
}

std::vector<std::string> stored_command(const std::vector<std::string>& argv) {
  std::vector<std::string> words = redact_command(argv);
  std::size_t total = 0;
  for (const std::string& word : words) total += word.size();
  if (total <= kMaxStoredCommandBytes) return words;
  std::vector<std::string> kept;
  std::size_t room = kMaxStoredCommandBytes;
  for (const std::string& word : words) {
    if (word.size() <= room) {
      kept.push_back(word);
      room -= word.size();
      continue;
    }
    std::size_t cut = room;
    while (cut > 0 && (static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80) --cut;
    if (cut > 0) kept.push_back(word.substr(0, cut));
    room -= cut;
    break;
  }
  std::size_t left_out = total - (kMaxStoredCommandBytes - room);
  kept.push_back("[spendcap: " + std::to_string(left_out) + " more bytes not kept]");
  return kept;
}

}  // namespace spendcap
