// FOCUS 1.2 rows (report.hpp): the columns FOCUS defines, then custom ones with the x_ prefix.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/report/report.hpp"

namespace spendcap {

namespace {

const char* const kColumns[] = {
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "BillingCurrency",
    "BillingAccountId",
    "BillingAccountName",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountCategory",
    "CommitmentDiscountType",
    "CommitmentDiscountStatus",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceName",
    "ServiceCategory",
    "ServiceSubcategory",
    "SkuId",
    "SkuPriceId",
    "Tags",
    "x_Team",
    "x_Experiment",
    "x_Project",
    "x_User",
    "x_Host",
    "x_RunStatus",
    "x_StopReason",
    "x_GpuUtilisation",
    "x_Running",
    "x_Pricing",
    "x_ExitCode",
    "x_CommandExitCode",
};

constexpr std::int64_t kDay = 86400;
// spendcap's storage price is per GB-month of 30 days (spend/meter.cpp): the storage rows' unit.
constexpr double kMonthSeconds = 30.0 * 86400.0;

// The UTC month around `unix_seconds`: [start, end).
std::pair<std::int64_t, std::int64_t> month_of(std::int64_t unix_seconds) {
  UtcFields day = utc_fields(static_cast<double>(unix_seconds));
  std::tm start{};
  start.tm_year = day.year - 1900;
  start.tm_mon = day.month - 1;
  start.tm_mday = 1;
  std::tm end = start;
  end.tm_mon += 1;  // timegm normalises December + 1
  return {static_cast<std::int64_t>(::timegm(&start)), static_cast<std::int64_t>(::timegm(&end))};
}

std::string decimal(Money amount) {
  char text[48];
  std::int64_t micros = amount.micros;
  std::snprintf(text, sizeof text, "%s%lld.%06lld", micros < 0 ? "-" : "",
                static_cast<long long>(std::llabs(micros) / 1000000),
                static_cast<long long>(std::llabs(micros) % 1000000));
  return text;
}

// A quantity to 9 decimals without trailing zeros: 2 s is "2", 2.5 s "2.5". Nine decimals keep a
// unit price x quantity within a micro-unit of its cost for any price below a thousand per unit.
std::string quantity(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9f", value);
  std::string out = text;
  while (!out.empty() && out.back() == '0') out.pop_back();
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out == "-0" ? "0" : out;
}

std::string pricing_name(const std::optional<Pricing>& pricing) {
  if (!pricing) return "unknown";
  return to_string(*pricing, PricingSpelling::display);
}

std::optional<std::string> tag(const ReportRow& row, const char* key) {
  auto it = row.tags.find(key);
  if (it == row.tags.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// What a run's compute rows are priced as: its SKU (the GPU or instance type, whatever the
// pricing: FOCUS keeps a SkuId across pricing categories), the unit and how many of them it used,
// and the list (on-demand) price per unit where the policy has one.
struct ComputeSku {
  std::string id;              // "spendcap/gpu/a100-80gb", "spendcap/instance/p4d", "spendcap/rate"
  std::string unit = "Hours";  // "GPU-Hours", "Instance-Hours"; "Hours" of the run otherwise
  double units = 1;            // GPUs or instances: PricingQuantity = units x hours
  std::optional<Money> list_unit_price;
  std::optional<Money> reserved_price;  // the commitment, for a reserved run
  std::string commitment_id, commitment_name;
};

ComputeSku compute_sku(const ReportRow& row, const FocusContext& context) {
  ComputeSku sku;
  auto gpu = tag(row, "gpu");
  auto instance = tag(row, "instance");
  if (!gpu && !instance) {
    // --rate: the rate is the only price there is; it is the list price when the run says it is
    // on-demand, and unknown for spot or reserved (their on-demand price was not given).
    sku.id = "spendcap/rate";
    if (row.pricing == Pricing::on_demand) sku.list_unit_price = row.rate_per_hour;
    return sku;
  }
  const bool is_gpu = gpu.has_value();
  const std::string& type = is_gpu ? *gpu : *instance;
  sku.id = std::string(is_gpu ? "spendcap/gpu/" : "spendcap/instance/") + type;
  sku.commitment_id = std::string("spendcap/commitment/") + (is_gpu ? "gpu/" : "instance/") + type;
  sku.commitment_name = "reserved " + type;
  // The commitment the run recorded (schema v16) holds whatever the report's policy says today;
  // the policy's reserved price stands in for runs recorded before it.
  if (row.pricing == Pricing::reserved && row.commitment) sku.reserved_price = row.commitment;
  const PriceSheet* sheet = nullptr;
  if (context.policy) {
    const auto& rates = is_gpu ? context.policy->gpu_rates : context.policy->instance_rates;
    auto found = rates.find(type);
    if (found != rates.end()) sheet = &found->second;
  }
  if (!sheet && !row.commitment) return sku;
  if (sheet && !row.commitment) sku.reserved_price = sheet->reserved;
  // How many GPUs (or instances) the rate buys, at the price the run was admitted at. Exact or
  // not at all: a run that priced a GPU and an instance together, or added storage to its rate,
  // has no single unit, and its rows say "Hours" of the run without a unit price.
  if (!row.pricing || (gpu && instance)) return sku;
  std::optional<Money> run_price = *row.pricing == Pricing::reserved && row.commitment
                                       ? row.commitment
                                   : sheet ? sheet->price(*row.pricing)
                                           : std::nullopt;
  if (!run_price || run_price->micros <= 0 || row.rate_per_hour.micros % run_price->micros != 0) {
    return sku;
  }
  sku.units = static_cast<double>(row.rate_per_hour.micros / run_price->micros);
  sku.unit = is_gpu ? "GPU-Hours" : "Instance-Hours";
  if (sheet) sku.list_unit_price = sheet->on_demand;
  return sku;
}

// Standard for on-demand; Dynamic for spot (the provider sets the price and changes it); Committed
// only where a commitment discount applied, which is a reserved run of a type whose reserved price
// the policy holds (that price is the commitment). Other: a reserved run with no such commitment,
// and a run recorded before the ledger kept its pricing.
const char* pricing_category(const ReportRow& row, const ComputeSku& sku) {
  if (!row.pricing) return "Other";
  switch (*row.pricing) {
    case Pricing::on_demand:
      return "Standard";
    case Pricing::spot:
      return "Dynamic";
    case Pricing::reserved:
      return sku.reserved_price ? "Committed" : "Other";
  }
  return "Other";
}

Money times(Money unit_price, double units) {
  return Money{
      static_cast<std::int64_t>(std::llround(static_cast<double>(unit_price.micros) * units))};
}

// One charge of a run: compute or checkpoint storage.
struct Charge {
  Money cost;  // of the whole run; split across its charge periods
  std::string sku_id, sku_price_id, pricing_unit, consumed_unit;
  double units_per_second = 0;  // PricingQuantity per second of the run
  double consumed_per_second = 0;
  std::optional<Money> list_unit_price;
  std::string pricing_category;
  bool committed = false;
  std::string commitment_id, commitment_name;
  std::string service_name, service_category, service_subcategory, description;
};

}  // namespace

std::string focus_header() {
  std::vector<std::string> names(std::begin(kColumns), std::end(kColumns));
  return join(names, ",") + "\n";
}

void append_focus_rows(std::string& out, const ReportRow& row, const FocusContext& context) {
  if (row.status == RunStatus::refused) return;  // no charge
  const CsvCells cells = context.cells;
  // The charge periods' bounds are whole seconds (FOCUS timestamps have no fractions; the end is
  // after the start), but the time split and the quantities use the run's exact times: a run of
  // 2.00 s consumes 2 s, not the 3 s its rounded period spans.
  const double started = row.started_at;
  const double ended = std::max(row.finished_at.value_or(std::max(context.now, started)), started);
  std::int64_t start = static_cast<std::int64_t>(std::floor(started));
  std::int64_t end = std::max(start + 1, static_cast<std::int64_t>(std::ceil(ended)));
  const double wall_seconds = ended - started;
  // The run's own time (launch until its tree was empty) where the ledger has it; the wall time
  // of its ledger row otherwise (a run still running).
  const double run_seconds = row.elapsed_seconds.value_or(wall_seconds);

  nlohmann::json tags = nlohmann::json::object();
  // spendcap's own keys carry its prefix (FOCUS: provider-defined tag keys are prefixed); the
  // user's --tag keys are as given.
  for (const auto& [key, value] : row.tags) {
    bool own = key == "gpu" || key == "gpus" || key == "instance" || key == "tracker";
    tags[own ? "spendcap/" + key : key] = value;
  }
  const std::string tags_text = dump_json(tags);
  std::string utilisation;
  if (row.gpu_seconds_allocated && row.gpu_seconds_busy && *row.gpu_seconds_allocated > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", *row.gpu_seconds_busy / *row.gpu_seconds_allocated);
    utilisation = text;
  }
  const std::string stop_reason = row.status == RunStatus::succeeded ? "" : row.reason;
  const std::string what = row.id + (row.experiment.empty() ? "" : " of " + row.experiment) +
                           (row.team.empty() ? "" : " (" + row.team + ")");
  const std::string pricing = pricing_name(row.pricing);
  // Both exit statuses, as `runs` names them (issue 40): spendcap's (124 for a budget trip) and
  // the command's own (0 after a checkpoint on that trip); empty where none was recorded.
  auto exit_text = [](std::optional<int> code) { return code ? std::to_string(*code) : ""; };
  const std::string exit_code = exit_text(row.exit_code);
  const std::string command_exit_code = exit_text(row.command_exit_code);

  std::vector<Charge> charges;
  const Money storage = row.storage_spend.value_or(Money{});
  {
    ComputeSku sku = compute_sku(row, context);
    Charge c;
    c.cost = row.spend - storage;
    c.sku_id = sku.id;
    c.sku_price_id = sku.id + "/" + pricing;
    c.pricing_unit = sku.unit;
    c.units_per_second = sku.units / 3600.0;
    c.consumed_unit = "Seconds";
    c.consumed_per_second = 1;
    c.list_unit_price = sku.list_unit_price;
    c.pricing_category = pricing_category(row, sku);
    c.committed = c.pricing_category == "Committed";
    c.commitment_id = sku.commitment_id;
    c.commitment_name = sku.commitment_name;
    c.service_name = "spendcap run";
    c.service_category = "AI and Machine Learning";
    c.service_subcategory = "Machine Learning";
    c.description = "spendcap run " + what;
    charges.push_back(std::move(c));
  }
  if (storage.micros > 0) {
    Charge c;
    c.cost = storage;
    c.sku_id = "spendcap/storage/checkpoint";
    c.sku_price_id = c.sku_id + "/standard";
    c.pricing_unit = c.consumed_unit = "GB-Months";
    std::optional<Money> price =
        context.policy ? context.policy->storage_per_gb_month : std::nullopt;
    // GB-months from the charge itself where the policy prices storage (so that price x quantity
    // is the cost); from the peak size otherwise (an upper bound of what was held).
    double gb_months =
        price && price->micros > 0
            ? static_cast<double>(storage.micros) / static_cast<double>(price->micros)
            : row.storage_peak_gb.value_or(0) * run_seconds / kMonthSeconds;
    c.units_per_second = c.consumed_per_second = run_seconds > 0 ? gb_months / run_seconds : 0;
    if (price && price->micros > 0) c.list_unit_price = price;
    c.pricing_category = "Standard";  // the policy's storage price, predetermined
    c.service_name = "spendcap checkpoint storage";
    c.service_category = "Storage";
    c.service_subcategory = "File Storage";
    c.description = "checkpoint storage of spendcap run " + what;
    charges.push_back(std::move(c));
  }

  for (const Charge& charge : charges) {
    Money charged;
    for (std::int64_t period = start; period < end;) {
      std::int64_t period_end = std::min(end, (period / kDay + 1) * kDay);
      bool last = period_end == end;
      // The run's exact share of wall time inside this period.
      double inside = std::max(0.0, std::min(ended, static_cast<double>(period_end)) -
                                        std::max(started, static_cast<double>(period)));
      double share_of_time = wall_seconds > 0 ? inside / wall_seconds : (last ? 1.0 : 0.0);
      Money share = last ? charge.cost - charged
                         : Money{static_cast<std::int64_t>(std::floor(
                               static_cast<double>(charge.cost.micros) * share_of_time))};
      charged += share;
      double seconds_here = run_seconds * share_of_time;
      double pricing_quantity = charge.units_per_second * seconds_here;
      std::string list_price, list_cost = decimal(share);
      if (charge.list_unit_price) {
        list_price = decimal(*charge.list_unit_price);
        list_cost = decimal(times(*charge.list_unit_price, pricing_quantity));
      }
      auto [month_start, month_end] = month_of(period);
      std::vector<std::string> row_cells = {
          decimal(share),
          decimal(share),
          list_cost,
          list_cost,  // no negotiated discount: ContractedCost is ListCost (FOCUS's default)
          list_price,
          list_price,
          csv_field(context.currency, cells),
          "spendcap",
          "spendcap ledger",
          rfc3339_utc(static_cast<double>(month_start)),
          rfc3339_utc(static_cast<double>(month_end)),
          rfc3339_utc(static_cast<double>(period)),
          rfc3339_utc(static_cast<double>(period_end)),
          "Usage",
          "",
          csv_field(charge.description, cells),
          "Usage-Based",
          charge.pricing_category,
          quantity(pricing_quantity),
          charge.pricing_unit,
          quantity(charge.consumed_per_second * seconds_here),
          charge.consumed_unit,
          charge.committed ? csv_field(charge.commitment_id, cells) : "",
          charge.committed ? csv_field(charge.commitment_name, cells) : "",
          charge.committed ? "Usage" : "",
          charge.committed ? "Reserved" : "",
          charge.committed ? "Used" : "",
          "spendcap",
          "spendcap",
          "spendcap",
          csv_field(row.id, cells),
          csv_field(row.experiment.empty() ? row.id : row.experiment, cells),
          "Run",
          charge.service_name,
          charge.service_category,
          charge.service_subcategory,
          csv_field(charge.sku_id, cells),
          csv_field(charge.sku_price_id, cells),
          csv_field(tags_text, cells),
          csv_field(row.team, cells),
          csv_field(row.experiment, cells),
          csv_field(row.project, cells),
          csv_field(row.user, cells),
          csv_field(row.host, cells),
          to_string(row.status),
          csv_field(stop_reason, cells),
          utilisation,
          row.status == RunStatus::running ? "true" : "false",
          pricing,
          exit_code,
          command_exit_code,
      };
      out += csv_line(row_cells);
      period = period_end;
    }
  }
}

}  // namespace spendcap
