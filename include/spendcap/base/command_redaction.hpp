// A command line as spendcap may keep it: the argv with the values of arguments that look like
// secrets replaced by "***", so that a token given on the command line never reaches the ledger
// (its runs table and outbox), `show`, or a webhook. Recognised, by the name's words (split on
// - and _, any case): password, passwd, pass, pwd, secret, token, auth, authorization,
// credential(s), and api/access/private/secret/auth/signing key ("--api-key"):
//   --token=VALUE, -token=VALUE     -> --token=***
//   --api-key VALUE                 -> --api-key ***   (the next argument, unless it is a flag)
//   HF_TOKEN=VALUE (an assignment)  -> HF_TOKEN=***
//   "Authorization: Bearer VALUE"   -> "Authorization: ***"
//   scheme://user:pass@host/...     -> scheme://user:***@host/...
//   ...?token=VALUE&x=1 (a query)   -> ...?token=***&x=1
//   ghp_..., github_pat_..., glpat-..., xoxb-..., sk-..., hf_..., AKIA... (a known token
//   format starting a word, anywhere in an argument) -> ghp_***
//   mysql/mysqldump/mariadb/sshpass ... -pVALUE (after such a tool, in the argv or in one
//   argument's words, as sh -c takes them) -> -p***; sshpass -p VALUE -> -p ***
// A name ending in a word that names where a secret is, not the secret (file, path, dir, env,
// name, id, type), is kept: "--token-file /run/secrets/t". A secret passed any other way (a bare
// positional argument) cannot be told from data; pass secrets in the environment. Pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace spendcap {

inline constexpr std::string_view kRedacted = "***";

std::vector<std::string> redact_command(const std::vector<std::string>& argv);

// The command as the ledger and the webhooks keep it: redacted, then at most
// kMaxStoredCommandBytes of its words' text (the word that crosses it cut at a UTF-8 boundary),
// then one last word saying how much was left out: "[spendcap: 123456 more bytes not kept]".
// A user's run must not fill the shared ledger with its argv (issue 38); the job gets it whole.
inline constexpr std::size_t kMaxStoredCommandBytes = 4096;
std::vector<std::string> stored_command(const std::vector<std::string>& argv);

// Whether an option or variable name ("--api-key", "AWS_SECRET_ACCESS_KEY") names a secret.
bool names_secret(std::string_view name);

}  // namespace spendcap
