#include <doctest/doctest.h>

#include "spendcap/base/command_redaction.hpp"

using namespace spendcap;

using Argv = std::vector<std::string>;

TEST_CASE("secret options' values are redacted, with = or as the next argument") {
  CHECK(redact_command({"python", "train.py", "--token=hf_abc123", "--epochs", "3"}) ==
        Argv{"python", "train.py", "--token=***", "--epochs", "3"});
  CHECK(redact_command({"tool", "--api-key", "sk-live-1", "--password", "pw", "-secret=x"}) ==
        Argv{"tool", "--api-key", "***", "--password", "***", "-secret=***"});
  CHECK(redact_command({"tool", "--WANDB_API_KEY=abc", "--aws-secret-access-key", "k"}) ==
        Argv{"tool", "--WANDB_API_KEY=***", "--aws-secret-access-key", "***"});
  // A flag after a secret-named switch is not its value.
  CHECK(redact_command({"tool", "--token", "--verbose"}) == Argv{"tool", "--token", "--verbose"});
}

TEST_CASE("assignments, headers and URLs with credentials are redacted") {
  CHECK(redact_command({"env", "HF_TOKEN=hf_x", "DB_PASSWORD=p", "MY_SECRET=s", "LR=0.1", "cmd"}) ==
        Argv{"env", "HF_TOKEN=***", "DB_PASSWORD=***", "MY_SECRET=***", "LR=0.1", "cmd"});
  CHECK(redact_command({"curl", "-H", "Authorization: Bearer abc.def", "-H", "X-Api-Key: k1"}) ==
        Argv{"curl", "-H", "Authorization: ***", "-H", "X-Api-Key: ***"});
  CHECK(redact_command({"psql", "postgresql://app:s3cret@db/x?sslmode=require"}) ==
        Argv{"psql", "postgresql://app:***@db/x?sslmode=require"});
  CHECK(redact_command({"git", "clone", "https://ghp_token@github.com/o/r"}) ==
        Argv{"git", "clone", "https://***@github.com/o/r"});
  CHECK(redact_command({"--data=https://h/p?user=u&access_token=t1&x=1"}) ==
        Argv{"--data=https://h/p?user=u&access_token=***&x=1"});
}

TEST_CASE("names that only look alike, and where a secret is kept, are not redacted") {
  Argv plain = {"python",
                "train.py",
                "--max-tokens",
                "100",
                "--tokenizer",
                "gpt2",
                "--token-file",
                "/run/secrets/t",
                "--passes",
                "3",
                "--keyword=x",
                "--key",
                "sort",
                "PASSWORD_ENV=DB_PW",
                "https://example.com/a?b=c"};
  CHECK(redact_command(plain) == plain);
  CHECK(names_secret("AWS_SECRET_ACCESS_KEY"));
  CHECK(names_secret("--api-key"));
  CHECK_FALSE(names_secret("--api-key-file"));
  CHECK_FALSE(names_secret("--monkey"));
}

TEST_CASE("tokens of the known formats are redacted wherever they stand, keeping their prefix") {
  std::string gh = "ghp_" + std::string(36, 'a');
  CHECK(redact_command({"tool", gh, "--x=" + gh, "url=https://h/" + gh}) ==
        Argv{"tool", "ghp_***", "--x=ghp_***", "url=https://h/ghp_***"});
  CHECK(redact_command({"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
                        "glpat-abcdefghij-1234567890", "xoxb-123456789012-abcdefghijkl",
                        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
                        "hf_abcdefghijklmnopqrstuvwxyzABCD", "AKIAIOSFODNN7EXAMPLE"}) ==
        Argv{"github_pat_***", "glpat-***", "xoxb-***", "sk-***", "sk-***", "hf_***", "AKIA***"});
  // In a shell command string too.
  CHECK(redact_command({"bash", "-c", "curl -H 'x: " + gh + "' https://api"}) ==
        Argv{"bash", "-c", "curl -H 'x: ghp_***' https://api"});
}

TEST_CASE("words that only start like a token are kept") {
  Argv plain = {"python",        "-m",
                "sk-learn-demo", "--model",
                "hf_tiny",       "use_hf_" + std::string(30, 'x'),
                "AKIA-short",    "xoxb-1",
                "ghp_short",     "mask-" + std::string(30, 'y')};
  CHECK(redact_command(plain) == plain);
}

TEST_CASE("-pVALUE is redacted for the tools known to take a password glued to -p") {
  CHECK(redact_command({"mysql", "-uroot", "-ps3cret", "-h", "db", "app"}) ==
        Argv{"mysql", "-uroot", "-p***", "-h", "db", "app"});
  CHECK(redact_command({"/usr/bin/mysqldump", "-pX", "db"}) ==
        Argv{"/usr/bin/mysqldump", "-p***", "db"});
  CHECK(redact_command({"sshpass", "-ppw", "ssh", "h"}) == Argv{"sshpass", "-p***", "ssh", "h"});
  CHECK(redact_command({"sshpass", "-p", "pw", "ssh", "h"}) ==
        Argv{"sshpass", "-p", "***", "ssh", "h"});
  CHECK(redact_command({"bash", "-c", "mysql -uroot -ps3cret db && echo ok"}) ==
        Argv{"bash", "-c", "mysql -uroot -p*** db && echo ok"});
  // mysql -p alone prompts: the next word is the database. Other tools' -p is not a password.
  CHECK(redact_command({"mysql", "-p", "app"}) == Argv{"mysql", "-p", "app"});
  CHECK(redact_command({"torchrun", "-p29500", "train.py"}) ==
        Argv{"torchrun", "-p29500", "train.py"});
  CHECK(redact_command({"tar", "-pxf", "a.tar"}) == Argv{"tar", "-pxf", "a.tar"});
}

TEST_CASE("the stored command is at most 4 KiB, then says how much was left out") {
  Argv small = {"python3", "train.py", "--token=x"};
  CHECK(stored_command(small) == Argv{"python3", "train.py", "--token=***"});
  std::string big(10000, 'a');
  Argv kept = stored_command({"python3", big, "--lr", "3"});
  REQUIRE(kept.size() == 3);
  CHECK(kept[0] == "python3");
  CHECK(kept[1] == std::string(kMaxStoredCommandBytes - 7, 'a'));
  // 10000 + 4 + 1 + 7 = 10012 bytes in all, 4096 kept.
  CHECK(kept[2] == "[spendcap: 5916 more bytes not kept]");
  // A cut never splits a UTF-8 sequence.
  std::string accents;
  while (accents.size() < 5000) accents += "\xc3\xa9";
  Argv cut = stored_command({"x", accents});
  CHECK(cut[1].size() == kMaxStoredCommandBytes - 2);  // 4094 bytes: whole characters
  CHECK(cut[2] == "[spendcap: 906 more bytes not kept]");
}
