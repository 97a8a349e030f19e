#include "spendcap/ledger/run_gpu.hpp"

#include <nlohmann/json.hpp>

namespace spendcap {

std::string timeline_to_text(const std::vector<RunGpuPoint>& timeline) {
  nlohmann::json points = nlohmann::json::array();
  for (const RunGpuPoint& p : timeline) {
    nlohmann::json u = p.utilisation ? nlohmann::json(*p.utilisation) : nlohmann::json(nullptr);
    nlohmann::json w = p.watts ? nlohmann::json(*p.watts) : nlohmann::json(nullptr);
    points.push_back({p.minute, u, w});
  }
  return points.dump();
}

std::vector<RunGpuPoint> timeline_from_text(const std::string& text) {
  std::vector<RunGpuPoint> timeline;
  nlohmann::json points = nlohmann::json::parse(text, nullptr, false);
  if (!points.is_array()) return timeline;
  for (const auto& p : points) {
    if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer()) continue;
    RunGpuPoint point;
    point.minute = p[0].get<int>();
    if (p[1].is_number()) point.utilisation = p[1].get<double>();
    if (p[2].is_number()) point.watts = p[2].get<double>();
    timeline.push_back(point);
  }
  return timeline;
}

}  // namespace spendcap
