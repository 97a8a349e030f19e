#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "spendcap/supervise/run_env.hpp"

using namespace spendcap;

TEST_CASE("run ids are random UUID v4") {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    std::string id = new_run_id();
    REQUIRE(id.size() == 36);
    CHECK(id[14] == '4');
    CHECK(std::string("89ab").find(id[19]) != std::string::npos);
    ids.insert(id);
  }
  CHECK(ids.size() == 100);
}

TEST_CASE("the GPU count comes from CUDA_VISIBLE_DEVICES, else Slurm") {
  CHECK(gpus_from_environment({}) == std::nullopt);
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}) == 4);
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", ""}}) == 0);
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", "-1"}}) == 0);
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}) == 0);
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", "GPU-5f2c,GPU-77aa"}}) == 2);
  CHECK(gpus_from_environment({{"SLURM_GPUS_ON_NODE", "8"}}) == 8);
  CHECK(gpus_from_environment({{"SLURM_JOB_GPUS", "0,1"}}) == 2);
  // CUDA_VISIBLE_DEVICES is what the job will actually see: it wins.
  CHECK(gpus_from_environment({{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_GPUS_ON_NODE", "8"}}) == 1);
}

TEST_CASE("Slurm and Kubernetes identifiers become tags") {
  auto tags = scheduler_tags({{"SLURM_JOB_ID", "4242"},
                              {"SLURM_ARRAY_JOB_ID", "4200"},
                              {"SLURM_ARRAY_TASK_ID", "7"},
                              {"SLURM_JOB_PARTITION", "gpu"},
                              {"POD_NAMESPACE", "ml"},
                              {"KUBERNETES_SERVICE_HOST", "10.0.0.1"},
                              {"HOSTNAME", "trainer-7c9f"},
                              {"UNRELATED", "x"}});
  CHECK(tags.at("slurm_job_id") == "4242");
  CHECK(tags.at("slurm_array_job_id") == "4200");
  CHECK(tags.at("slurm_array_task_id") == "7");
  CHECK(tags.at("slurm_partition") == "gpu");
  CHECK(tags.at("k8s_namespace") == "ml");
  CHECK(tags.at("k8s_pod") == "trainer-7c9f");
  CHECK(tags.size() == 6);
  CHECK(scheduler_tags({{"HOSTNAME", "laptop"}}).empty());  // not in a pod
}

TEST_CASE("the job's environment: SPENDCAP_* set, secrets removed, stale values cleared") {
  Environment env = {{"PATH", "/bin"},
                     {"SPENDCAP_SLACK_URL", "https://hooks.example/secret"},
                     {"SPENDCAP_WEBHOOK_SECRET", "s3cret"},
                     {"SPENDCAP_PROJECT", "from-an-outer-run"}};
  JobIdentity identity{"id-1", "vision", "sweep", "", "0.1", "SIGUSR1", "/tmp/x/checkpoint-done"};
  auto entries = job_environment(env, identity, {"SPENDCAP_SLACK_URL", "SPENDCAP_WEBHOOK_SECRET"});
  auto has = [&](const std::string& entry) {
    return std::find(entries.begin(), entries.end(), entry) != entries.end();
  };
  CHECK(has("PATH=/bin"));
  CHECK(has("SPENDCAP_RUN_ID=id-1"));
  CHECK(has("SPENDCAP_TEAM=vision"));
  CHECK(has("SPENDCAP_EXPERIMENT=sweep"));
  CHECK(has("SPENDCAP_BUDGET_USD=0.1"));
  CHECK(has("SPENDCAP_CHECKPOINT_SIGNAL=SIGUSR1"));
  CHECK(has("SPENDCAP_CHECKPOINT_DONE=/tmp/x/checkpoint-done"));
  for (const std::string& entry : entries) {
    CHECK(entry.find("secret") == std::string::npos);
    CHECK(entry.find("SPENDCAP_PROJECT") == std::string::npos);  // this run has none
  }
}

TEST_CASE("the command fingerprint separates its parts") {
  CHECK(command_fingerprint("t", "e", {"ab", "c"}) != command_fingerprint("t", "e", {"a", "bc"}));
  CHECK(command_fingerprint("t", "e", {"x"}) == command_fingerprint("t", "e", {"x"}));
  CHECK(command_fingerprint("t", "e", {"x"}).size() == 16);
}
