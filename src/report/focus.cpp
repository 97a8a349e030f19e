// FOCUS 1.2 rows (report.hpp): the mandatory columns, then custom ones with the x_ prefix.
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
};

constexpr std::int64_t kDay = 86400;

std::string iso_utc(std::int64_t unix_seconds) {
  return rfc3339_utc(static_cast<double>(unix_seconds));
}

// The UTC month around `unix_seconds`: [start, end).
std::pair<std::int64_t, std::int64_t> month_of(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::tm start{};
  start.tm_year = tm.tm_year;
  start.tm_mon = tm.tm_mon;
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

std::string hours(double seconds) {
  char text[48];
  std::snprintf(text, sizeof text, "%.6f", seconds / 3600.0);
  return text;
}

const char* pricing_category(Pricing pricing) {
  switch (pricing) {
    case Pricing::on_demand:
      return "Standard";
    case Pricing::spot:
      return "Dynamic";
    case Pricing::reserved:
      return "Committed";
  }
  return "Other";
}

}  // namespace

std::string focus_header() {
  std::vector<std::string> names(std::begin(kColumns), std::end(kColumns));
  return join(names, ",") + "\n";
}

void append_focus_rows(std::string& out, const ReportRow& row, const FocusContext& context) {
  if (row.status == RunStatus::refused) return;  // no charge
  // Whole seconds: FOCUS timestamps have no fractions. The end is after the start.
  std::int64_t start = static_cast<std::int64_t>(std::floor(row.started_at));
  double end_at = row.finished_at ? *row.finished_at : std::max(context.now, row.started_at);
  std::int64_t end = std::max(start + 1, static_cast<std::int64_t>(std::ceil(end_at)));
  const double total_seconds = static_cast<double>(end - start);

  nlohmann::json tags = nlohmann::json::object();
  for (const auto& [key, value] : row.tags) tags[key] = value;
  const std::string tags_text = dump_json(tags);
  const Pricing pricing = row.pricing.value_or(context.default_pricing);
  std::string sku =
      row.gpu_type ? "gpu:" + *row.gpu_type : "rate:" + to_decimal(row.rate_per_hour) + "/h";
  std::string utilisation;
  if (row.gpu_seconds_allocated && row.gpu_seconds_busy && *row.gpu_seconds_allocated > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", *row.gpu_seconds_busy / *row.gpu_seconds_allocated);
    utilisation = text;
  }
  const std::string stop_reason = row.status == RunStatus::succeeded ? "" : row.reason;
  const std::string description = "spendcap run " + row.id +
                                  (row.experiment.empty() ? "" : " of " + row.experiment) +
                                  (row.team.empty() ? "" : " (" + row.team + ")");

  Money charged;
  for (std::int64_t period = start; period < end;) {
    std::int64_t period_end = std::min(end, (period / kDay + 1) * kDay);
    bool last = period_end == end;
    Money share = last ? row.spend - charged
                       : Money{static_cast<std::int64_t>(
                             std::floor(static_cast<double>(row.spend.micros) *
                                        static_cast<double>(period_end - period) / total_seconds))};
    charged += share;
    auto [month_start, month_end] = month_of(period);
    std::string seconds = hours(static_cast<double>(period_end - period));
    std::vector<std::string> cells = {
        decimal(share),
        decimal(share),
        decimal(share),
        decimal(share),
        context.currency,
        "spendcap",
        "spendcap ledger",
        iso_utc(month_start),
        iso_utc(month_end),
        iso_utc(period),
        iso_utc(period_end),
        "Usage",
        "",
        csv_field(description),
        "Usage-Based",
        pricing_category(pricing),
        seconds,
        "Hours",
        seconds,
        "Hours",
        "spendcap",
        "spendcap",
        "spendcap",
        csv_field(row.id),
        csv_field(row.experiment.empty() ? row.id : row.experiment),
        "Run",
        "spendcap run",
        "AI and Machine Learning",
        "Machine Learning",
        csv_field(sku),
        csv_field(tags_text),
        csv_field(row.team),
        csv_field(row.experiment),
        csv_field(row.project),
        csv_field(row.user),
        csv_field(row.host),
        to_string(row.status),
        csv_field(stop_reason),
        utilisation,
        row.status == RunStatus::running ? "true" : "false",
    };
    out += join(cells, ",");
    out += "\n";
    period = period_end;
  }
}

}  // namespace spendcap
