// `estimate`: what a run will cost, before it starts (report_commands.hpp).
#include "spendcap/cli/report_commands.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/cli/verbs.hpp"

#include "admin_parts.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/report/estimate.hpp"
#include "spendcap/report/report.hpp"
#include "spendcap/report/report_rollup.hpp"
#include "spendcap/run/estimate_fit.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

using admin_parts::load_chosen_policy;
using admin_parts::utc_now;

namespace {

double parse_fraction(const std::string& text, const std::string& flag) {
  double value = parse_number(text, flag);
  if (value > 1) throw usage_error(flag + " " + text, "must be a fraction in (0, 1]", "e.g. 0.45");
  return value;
}

double parse_price(const std::string& text, const std::string& flag) {
  return parse_money_or_throw(text, flag).units();
}

int parse_whole(const std::string& text, const std::string& flag) {
  double value = parse_number(text, flag);
  if (value != std::floor(value) || value > 1e6) {
    throw usage_error(flag + " " + text, "not a whole number from 1 to 1000000");
  }
  return static_cast<int>(value);
}

Pricing pricing_of(const std::optional<std::string>& text, const Policy& policy) {
  if (!text) return policy.defaults.pricing;
  auto pricing = parse_pricing(*text);
  if (!pricing)
    throw usage_error("--pricing " + *text, "not a pricing", "on-demand, spot or reserved");
  return *pricing;
}

const PriceSheet& sheet_of(const std::map<std::string, PriceSheet>& rates, const std::string& type,
                           const std::string& flag) {
  auto it = rates.find(type);
  if (it == rates.end()) {
    std::vector<std::string> names;
    for (const auto& [name, sheet] : rates) names.push_back(name);
    throw usage_error(flag + " " + type, "no rate for this type in the policy",
                      "known types: " + (names.empty() ? std::string("none") : join(names, ", ")));
  }
  return it->second;
}

double price_at(const PriceSheet& sheet, Pricing pricing, const std::string& what) {
  auto price = sheet.price(pricing);
  if (!price) {
    throw usage_error(what, "the policy has no " + to_string(pricing) + " price for it",
                      "choose another --pricing");
  }
  return price->units();
}

// The ledger, with the policy's budgets applied where the ledger is the caller's own (as `run`
// does: loading the owner's policy applies it), so an estimate fits the budgets a run would meet.
std::unique_ptr<Ledger> open_with_budgets(const LedgerChoice& choice, const LoadedPolicy& loaded) {
  std::unique_ptr<Ledger> ledger = open_ledger_session(choice).ledger;
  const Policy& owner = loaded.locked_policy ? *loaded.locked_policy : loaded.policy;
  std::vector<BudgetRule> rules = budget_rules_of(owner);
  if (!rules.empty() && ledger->is_personal()) ledger->apply_budgets(rules, false);
  return ledger;
}

// ---- estimate, by kind ----

// An amount of money in --json: rounded to spendcap's unit of money (a millionth), as the ledger
// keeps it, not a double's 16 digits (41.66666666666667).
double money_json(double units) {
  return std::round(units * 1e6) / 1e6;
}

int estimate_serving(const EstimateRequest& r, const std::string& currency) {
  if (!r.price_per_hour) throw usage_error("estimate --serving", "needs --price-per-hour");
  double price = parse_price(*r.price_per_hour, "--price-per-hour");
  nlohmann::json j = {
      {"kind", "serving"}, {"price_per_hour", money_json(price)}, {"currency", currency}};
  if (r.predictions_per_day) {
    if (r.rps || r.utilisation) {
      throw usage_error("estimate --serving",
                        "--predictions-per-day or --rps with --utilisation, not both");
    }
    double per_day = parse_number(*r.predictions_per_day, "--predictions-per-day");
    double per_thousand = serving_cost_per_thousand(price, per_day);
    j["predictions_per_day"] = per_day;
    j["cost_per_thousand"] = money_json(per_thousand);
    if (r.json) {
      std::cout << dump_json(j, 2) << "\n";
    } else {
      std::cout << "one replica at " << format_money(price, currency) << "/h answering "
                << fixed(per_day, 0) << " predictions a day\n"
                << "cost per thousand predictions: " << format_money(per_thousand, currency)
                << "\n";
    }
    return 0;
  }
  if (!r.rps || !r.utilisation) {
    throw usage_error("estimate --serving",
                      "needs --rps and --utilisation, or --predictions-per-day");
  }
  double rps = parse_number(*r.rps, "--rps");
  double utilisation = parse_fraction(*r.utilisation, "--utilisation");
  double per_million = serving_cost_per_million(price, rps, utilisation);
  j["rps"] = rps;
  j["utilisation"] = utilisation;
  j["cost_per_million"] = money_json(per_million);
  if (r.json) {
    std::cout << dump_json(j, 2) << "\n";
  } else {
    std::cout << format_money(price, currency) << "/h at " << fixed(rps, 0) << " rps, "
              << fixed(100 * utilisation, 0) << "% utilised\n"
              << "cost per million predictions: " << format_money(per_million, currency) << "\n";
  }
  return 0;
}

int estimate_reserved_vs_on_demand(const EstimateRequest& r, const std::string& currency) {
  if (!r.reserved || !r.on_demand) {
    throw usage_error("estimate --reserved", "needs both --reserved PRICE and --on-demand PRICE");
  }
  double reserved = parse_price(*r.reserved, "--reserved");
  double on_demand = parse_price(*r.on_demand, "--on-demand");
  if (on_demand <= 0) throw usage_error("--on-demand " + *r.on_demand, "must be above 0");
  ReservedEstimate e = estimate_reserved(reserved, on_demand);
  nlohmann::json j = {{"kind", "reserved"},
                      {"reserved_per_hour", money_json(reserved)},
                      {"on_demand_per_hour", money_json(on_demand)},
                      {"break_even_utilisation", e.break_even},
                      {"reserved_yearly", money_json(e.reserved_yearly)},
                      {"currency", currency}};
  nlohmann::json at = nlohmann::json::array();
  for (const auto& use : e.on_demand_at) {
    at.push_back({{"busy", use.busy}, {"on_demand_yearly", money_json(use.on_demand_yearly)}});
  }
  j["on_demand_at"] = at;
  // The team's observed utilisation over the last 30 days, where its runs measured it.
  std::optional<double> observed;
  std::int64_t measured_runs = 0;
  if (r.team) {
    std::unique_ptr<Ledger> ledger = open_ledger_session(r.choice).ledger;
    ReportOptions options;
    options.team = r.team;
    if (r.gpu) options.by = {};
    ReportBuilder builder(options);
    double now = utc_now();
    ledger->for_each_run_started(now - 30 * 86400.0, std::numeric_limits<double>::max(),
                                 [&](const RunRecord& run) {
                                   ReportRow row = report_row_of(run);
                                   if (r.gpu && row.gpu_type != *r.gpu) return;
                                   builder.add(row);
                                 });
    Report report = std::move(builder).finish();
    observed = report.total.utilisation();
    measured_runs = report.total.gpu_hours_busy.runs;
    j["team"] = *r.team;
    j["observed_utilisation"] = observed ? nlohmann::json(*observed) : nlohmann::json();
    j["observed_runs"] = measured_runs;
  }
  if (r.json) {
    std::cout << dump_json(j, 2) << "\n";
    return 0;
  }
  std::cout << "reserved " << format_money(reserved, currency) << "/h vs on demand "
            << format_money(on_demand, currency) << "/h\n"
            << "break-even utilisation: " << fixed(100 * e.break_even, 0)
            << "% (reserving is cheaper for a GPU busy more than that)\n"
            << "a year (8,760 h): reserved " << format_money(e.reserved_yearly, currency)
            << " whatever the use; on demand:\n";
  for (const auto& use : e.on_demand_at) {
    std::cout << "  " << fixed(100 * use.busy, 0)
              << "% busy: " << format_money(use.on_demand_yearly, currency)
              << (use.on_demand_yearly < e.reserved_yearly ? "  (on demand is cheaper)"
                                                           : "  (reserved is cheaper)")
              << "\n";
  }
  if (r.team) {
    std::cout << "team " << escape_for_terminal(*r.team) << ", last 30 days"
              << (r.gpu ? " on " + escape_for_terminal(*r.gpu) : std::string()) << ": ";
    if (observed) {
      std::cout << fixed(100 * *observed, 0) << "% busy (" << measured_runs
                << " runs measured): " << (*observed > e.break_even ? "reserve" : "stay on demand")
                << "\n";
    } else {
      std::cout << "utilisation not measured ("
                << (r.gpu ? "the ledger does not record a run's GPU type yet: leave out --gpu "
                            "for the team's runs on any type"
                          : "no run measured its GPUs")
                << ")\n";
    }
  }
  return 0;
}

int estimate_compare(const EstimateRequest& r, const Policy& policy) {
  if (!r.params || !r.tokens)
    throw usage_error("estimate --compare", "needs --params and --tokens");
  double params = parse_number(*r.params, "--params");
  double tokens = parse_number(*r.tokens, "--tokens");
  double mfu = r.mfu ? parse_fraction(*r.mfu, "--mfu") : 0.4;
  double bytes = r.bytes_per_param ? parse_number(*r.bytes_per_param, "--bytes-per-param") : 16;
  double activations =
      r.activations_gb ? parse_number(*r.activations_gb, "--activations-gb", true) : 0;
  Pricing pricing = pricing_of(r.pricing, policy);
  std::vector<GpuOffer> offers;
  std::vector<std::string> skipped;
  for (const auto& [name, sheet] : policy.gpu_rates) {
    auto price = sheet.price(pricing);
    std::vector<std::string> missing;
    if (!price) missing.push_back("no " + to_string(pricing) + " price");
    if (!sheet.memory_gb) missing.push_back("no memory_gb");
    if (!sheet.peak_tflops) missing.push_back("no peak_tflops");
    if (!missing.empty()) {
      skipped.push_back(name + " (" + join(missing, ", ") + ")");
      continue;
    }
    offers.push_back({name, price->units(), *sheet.memory_gb, *sheet.peak_tflops});
  }
  if (offers.empty()) {
    throw usage_error("estimate --compare",
                      "no GPU type of the policy has a price, memory_gb and peak_tflops",
                      "add memory_gb and peak_tflops to the policy's rates.gpu entries");
  }
  std::vector<GpuChoice> choices = compare_gpus(offers, params, tokens, bytes, activations, mfu);
  const GpuChoice* pick = recommended(choices);
  double state_gb = params * bytes / 1e9 + activations;
  if (r.json) {
    nlohmann::json j = {{"kind", "compare"}, {"state_gb", state_gb}, {"currency", policy.currency}};
    nlohmann::json list = nlohmann::json::array();
    for (const GpuChoice& c : choices) {
      list.push_back({{"gpu", c.offer.name},
                      {"gpus", c.gpus},
                      {"fits_one_gpu", c.fits_one},
                      {"gpu_hours", c.gpu_hours},
                      {"wall_hours", c.wall_hours},
                      {"cost", c.cost}});
    }
    j["choices"] = list;
    j["recommended"] = pick->offer.name;
    j["skipped"] = skipped;
    std::cout << dump_json(j, 2) << "\n";
    return 0;
  }
  std::cout << "training state: " << fixed(state_gb, 1) << " GB (" << fixed(bytes, 0)
            << " bytes per parameter" << (activations > 0 ? " + activations" : "") << ")\n";
  for (const GpuChoice& c : choices) {
    std::cout << "  " << escape_for_terminal(c.offer.name) << ": " << c.gpus << " x "
              << fixed(c.offer.memory_gb, 0) << " GB, " << fixed(c.gpu_hours, 1) << " GPU-hours, "
              << fixed(c.wall_hours, 1) << " h wall, " << format_money(c.cost, policy.currency);
    if (!c.fits_one) {
      std::cout << "  (cannot hold the model on one GPU: needs " << c.gpus
                << "; scale up before scaling out)";
    }
    std::cout << "\n";
  }
  for (const std::string& s : skipped) std::cout << "  skipped " << escape_for_terminal(s) << "\n";
  std::cout << "choose: " << escape_for_terminal(pick->offer.name)
            << (pick->fits_one ? " (cheapest that holds the model on one GPU)"
                               : " (no type holds the model on one GPU; cheapest)")
            << "\n";
  return 0;
}

}  // namespace

int estimate_command(const EstimateRequest& r) {
  LoadedPolicy loaded = load_chosen_policy(r.choice);
  const Policy& policy = loaded.policy;
  const std::string& currency = policy.currency;
  if (r.serving) return estimate_serving(r, currency);
  if (r.compare) return estimate_compare(r, policy);
  if (r.reserved || (r.on_demand && !r.interruptions_per_100h)) {
    return estimate_reserved_vs_on_demand(r, currency);
  }

  const bool from_steps = r.step_time || r.steps;
  const bool from_hours = r.gpu_hours.has_value();
  // From the GPU-hours: priced per GPU, as a size estimate is (it also gives GPU-hours).
  const bool from_size = r.params || r.tokens || from_hours;
  const int sources = (from_steps ? 1 : 0) + (r.params || r.tokens ? 1 : 0) + (from_hours ? 1 : 0);
  if (sources != 1) {
    throw usage_error(
        "estimate",
        sources > 1 ? "give one of step time, model size or GPU-hours, not several"
                    : "nothing to estimate",
        "--gpu-hours H, --step-time T --steps N, or --params P --tokens D (or --serving, "
        "--compare, --reserved)");
  }
  Pricing pricing = pricing_of(r.pricing, policy);
  int instances = r.instances ? parse_whole(*r.instances, "--instances") : 1;
  int gpus = r.gpus ? parse_whole(*r.gpus, "--gpus") : 1;
  if (r.rate && (r.gpu || r.instance)) {
    throw usage_error("--rate " + *r.rate, "give --rate or --gpu/--instance, not both");
  }
  // The price per hour of one instance (steps) or of one accelerator (size), and its on-demand
  // counterpart for spot.
  std::optional<double> price, on_demand_price;
  std::string priced_as;
  const PriceSheet* gpu_sheet = r.gpu ? &sheet_of(policy.gpu_rates, *r.gpu, "--gpu") : nullptr;
  if (r.rate) {
    price = parse_price(*r.rate, "--rate");
    priced_as = "--rate";
  } else if (r.gpu || r.instance) {
    double total = 0, od = 0;
    bool od_known = true;
    auto od_of = [&](const PriceSheet& sheet, double times) {
      if (auto p = sheet.price(Pricing::on_demand)) {
        od += p->units() * times;
      } else {
        od_known = false;
      }
    };
    if (gpu_sheet) {
      double per_gpu = price_at(*gpu_sheet, pricing, "--gpu " + *r.gpu);
      total += per_gpu * (from_size ? 1 : gpus);
      od_of(*gpu_sheet, from_size ? 1 : gpus);
      priced_as = (from_size ? "" : std::to_string(gpus) + " x ") + *r.gpu;
    }
    if (r.instance) {
      if (from_size) {
        throw usage_error("--instance " + *r.instance,
                          "an estimate from model size or GPU-hours is priced per GPU",
                          "give --gpu TYPE or --rate PRICE_PER_GPU_HOUR");
      }
      const PriceSheet& sheet = sheet_of(policy.instance_rates, *r.instance, "--instance");
      total += price_at(sheet, pricing, "--instance " + *r.instance);
      od_of(sheet, 1);
      priced_as += (priced_as.empty() ? "" : " + ") + *r.instance;
    }
    price = total;
    if (od_known) on_demand_price = od;
    priced_as += " " + to_string(pricing);
  }
  if (r.on_demand) on_demand_price = parse_price(*r.on_demand, "--on-demand");

  nlohmann::json j = nlohmann::json::object();
  j["currency"] = currency;
  double billed_hours = 0;  // instance-hours or accelerator-hours
  std::vector<std::string> lines;
  if (from_steps) {
    if (!r.step_time || !r.steps)
      throw usage_error("estimate", "needs both --step-time and --steps");
    double step = seconds_of(*r.step_time, "--step-time");
    double steps = parse_number(*r.steps, "--steps");
    StepEstimate e = estimate_from_steps(step, steps, instances, price.value_or(0));
    billed_hours = e.instance_hours;
    j["kind"] = "steps";
    j["wall_hours"] = e.wall_hours;
    j["instance_hours"] = e.instance_hours;
    lines.push_back("wall time: " + fixed(e.wall_hours, 3) + " h (" +
                    format_duration(std::chrono::seconds(std::llround(e.wall_hours * 3600))) + ")" +
                    (instances > 1 ? ", " + fixed(e.instance_hours, 3) + " instance-hours" : ""));
  } else if (from_hours) {
    double gpu_hours = parse_number(*r.gpu_hours, "--gpu-hours");
    billed_hours = gpu_hours;
    double wall_hours = gpu_hours / gpus;
    j["kind"] = "gpu_hours";
    j["gpu_hours"] = gpu_hours;
    j["accelerator_hours"] = gpu_hours;
    j["wall_hours"] = wall_hours;
    j["gpus"] = gpus;
    lines.push_back("GPU-hours: " + fixed(gpu_hours, 1) + ", wall time at " + std::to_string(gpus) +
                    " GPU" + (gpus > 1 ? "s" : "") + ": " + fixed(wall_hours, 2) + " h");
  } else {
    if (!r.params || !r.tokens) throw usage_error("estimate", "needs both --params and --tokens");
    double params = parse_number(*r.params, "--params");
    double tokens = parse_number(*r.tokens, "--tokens");
    double mfu = r.mfu ? parse_fraction(*r.mfu, "--mfu") : 0.4;
    double peak = 0;
    if (r.peak_tflops) {
      peak = parse_number(*r.peak_tflops, "--peak-tflops");
    } else if (gpu_sheet && gpu_sheet->peak_tflops) {
      peak = *gpu_sheet->peak_tflops;
    } else {
      throw usage_error("estimate --params", "no peak TFLOP/s",
                        "give --peak-tflops, or --gpu TYPE whose policy entry has peak_tflops");
    }
    FlopsEstimate e = estimate_from_size(params, tokens, peak, mfu, gpus, price);
    billed_hours = e.accelerator_hours;
    j["kind"] = "size";
    j["flops"] = e.flops;
    j["achieved_tflops"] = e.achieved_tflops;
    j["accelerator_hours"] = e.accelerator_hours;
    j["wall_hours"] = e.wall_hours;
    j["gpus"] = gpus;
    char flops[32];
    std::snprintf(flops, sizeof flops, "%.3g", e.flops);
    lines.push_back("compute: " + std::string(flops) + " FLOPs (6 x params x tokens) at " +
                    fixed(e.achieved_tflops, 0) + " TFLOP/s achieved per accelerator (mfu " +
                    fixed(mfu, 2) + ")");
    lines.push_back("accelerator-hours: " + fixed(e.accelerator_hours, 1));
    lines.push_back("wall time at " + std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : "") + ": " +
                    fixed(e.wall_hours, 2) + " h");
  }
  std::optional<double> cost;
  if (price) {
    cost = billed_hours * *price;
    j["price_per_hour"] = money_json(*price);
    lines.push_back("cost: " + format_money(*cost, currency) + " (" + priced_as + " at " +
                    format_money(*price, currency) + "/h)");
  } else {
    lines.push_back("cost: no price (give --rate, or --gpu/--instance priced by the policy)");
  }
  if (r.interruptions_per_100h || r.lost_per_interruption) {
    if (pricing != Pricing::spot && !r.rate) {
      throw usage_error("--interruptions-per-100h", "applies to spot pricing",
                        "add --pricing spot");
    }
    if (!r.interruptions_per_100h || !r.lost_per_interruption) {
      throw usage_error("estimate",
                        "spot needs --interruptions-per-100h and --lost-per-interruption");
    }
    if (!price)
      throw usage_error("estimate", "spot needs a price: --rate or --gpu with a spot price");
    double per_100h = parse_number(*r.interruptions_per_100h, "--interruptions-per-100h", true);
    double lost = seconds_of(*r.lost_per_interruption, "--lost-per-interruption") / 3600.0;
    SpotEstimate s =
        estimate_spot(billed_hours, *price, on_demand_price.value_or(0), per_100h, lost);
    cost = s.spot_cost;
    j["interruptions"] = s.interruptions;
    j["redone_hours"] = s.redone_hours;
    j["spot_cost"] = money_json(s.spot_cost);
    lines.push_back("spot: " + fixed(s.interruptions, 1) + " interruptions, " +
                    fixed(s.redone_hours, 1) + " h redone: " + format_money(s.spot_cost, currency));
    if (on_demand_price) {
      j["on_demand_cost"] = money_json(s.on_demand_cost);
      lines.push_back("on demand: " + format_money(s.on_demand_cost, currency) + " (" +
                      format_money(*on_demand_price, currency) + "/h)");
    }
  }
  if (cost) j["cost"] = money_json(*cost);

  int status = 0;
  if (r.team || r.experiment) {
    if (!cost) throw usage_error("estimate --team", "no cost to fit: give a price");
    std::vector<Scope> scopes;
    if (r.team) scopes.push_back({ScopeKind::team, *r.team});
    if (r.experiment) scopes.push_back({ScopeKind::experiment, *r.experiment});
    std::unique_ptr<Ledger> ledger = open_with_budgets(r.choice, loaded);
    std::vector<BudgetFit> fits = budget_fits(*ledger, scopes, *cost);
    nlohmann::json budgets = nlohmann::json::array();
    for (const Scope& scope : scopes) {
      bool any = false;
      for (const BudgetFit& f : fits) any = any || f.scope.rfind(to_string(scope) + " ", 0) == 0;
      if (!any) lines.push_back(to_string(scope) + ": no budget in the ledger");
    }
    for (const BudgetFit& f : fits) {
      budgets.push_back(
          {{"scope", f.scope}, {"remaining", money_json(f.remaining)}, {"fits", f.fits}});
      lines.push_back(f.scope + ": " + format_money(f.remaining, currency) +
                      " remaining: " + (f.fits ? "fits" : "does NOT fit"));
      if (!f.fits) status = to_int(ExitCode::refused);
    }
    j["budgets"] = budgets;
    j["fits"] = status == 0;
  }
  if (r.json) {
    std::cout << dump_json(j, 2) << "\n";
  } else {
    for (const std::string& line : lines) std::cout << escape_for_terminal(line) << "\n";
  }
  return status;
}

namespace {

VerbRun add_estimate(CLI::App& command, CLI::App&, VerbContext&) {
  auto request = std::make_shared<EstimateRequest>();
  auto& r = *request;
  CLI::App* estimate = &command;
  add_ledger_options(*estimate, r.choice);
  estimate->add_option("--step-time", r.step_time, "time per step (0.8s)");
  estimate->add_option("--steps", r.steps, "number of steps");
  estimate->add_option("--gpu-hours", r.gpu_hours, "GPU-hours of work (2000), priced per GPU");
  estimate->add_option("--params", r.params, "model parameters (1e9)");
  estimate->add_option("--tokens", r.tokens, "training tokens (20e9): about 6ND FLOPs");
  estimate->add_option("--peak-tflops", r.peak_tflops, "peak TFLOP/s per GPU (else the policy's)");
  estimate->add_option("--mfu", r.mfu, "model FLOPs utilisation (default 0.4)");
  estimate->add_option("--rate", r.rate, "price per hour (per instance; per GPU for --params)");
  estimate->add_option("--gpu", r.gpu, "GPU type, priced by the policy");
  estimate->add_option("--gpus", r.gpus, "GPUs (per instance for --steps; in all for --params)");
  estimate->add_option("--instance", r.instance, "instance type, priced by the policy");
  estimate->add_option("--instances", r.instances, "number of instances (default 1)");
  estimate->add_option("--pricing", r.pricing, "on-demand, spot or reserved");
  estimate->add_option("--interruptions-per-100h", r.interruptions_per_100h,
                       "spot interruptions per 100 hours");
  estimate->add_option("--lost-per-interruption", r.lost_per_interruption,
                       "work lost per interruption (30m)");
  estimate->add_option("--team", r.team, "fit the team's remaining budget (exit 120 if not)");
  estimate->add_option("--experiment", r.experiment, "fit the experiment's remaining budget");
  estimate->add_flag("--compare", r.compare, "price the work on every GPU type of the policy");
  estimate->add_option("--bytes-per-param", r.bytes_per_param,
                       "training state per parameter (default 16: mixed-precision Adam)");
  estimate->add_option("--activations-gb", r.activations_gb, "activation memory, GB");
  estimate->add_flag("--serving", r.serving, "cost per prediction of a serving process");
  estimate->add_option("--price-per-hour", r.price_per_hour, "serving: price of a replica");
  estimate->add_option("--rps", r.rps, "serving: requests per second at full load");
  estimate->add_option("--utilisation", r.utilisation, "serving: fraction of time busy");
  estimate->add_option("--predictions-per-day", r.predictions_per_day,
                       "serving: predictions a day (instead of --rps and --utilisation)");
  estimate->add_option("--reserved", r.reserved, "reserved price per hour");
  estimate->add_option("--on-demand", r.on_demand, "on-demand price per hour");
  estimate->add_flag("--json", r.json, "print JSON");
  accept_count_suffixes(*estimate, "--steps");
  accept_count_suffixes(*estimate, "--params");
  accept_count_suffixes(*estimate, "--tokens");
  accept_count_suffixes(*estimate, "--predictions-per-day");
  return [request] { return estimate_command(*request); };
}

}  // namespace

const Verb kEstimateVerb = {"estimate", "what a run will cost, before it starts", add_estimate};

}  // namespace spendcap
