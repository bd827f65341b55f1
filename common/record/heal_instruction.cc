#include "common/record/heal_instruction.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/record/json_record.h"
#include "nlohmann/json.hpp"

namespace ringtrain {

std::string HealInstruction::ToJson() const {
  return JsonRecord()
      .Add("generation", generation)
      .Add("master_addr", master_addr)
      .Add("master_port", int64_t{master_port})
      .str();
}

absl::StatusOr<HealInstruction> ParseHealInstruction(absl::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("heal instruction '", json, "': ", what));
  };
  if (!j.is_object()) return bad("not a JSON object");
  HealInstruction h;
  const auto generation = j.find("generation");
  if (generation == j.end() || !generation->is_number_integer() || generation->get<int64_t>() < 1) {
    return bad("\"generation\" must be an integer >= 1");
  }
  h.generation = generation->get<int64_t>();
  const auto addr = j.find("master_addr");
  if (addr == j.end() || !addr->is_string() || addr->get<std::string>().empty()) {
    return bad("\"master_addr\" must be a non-empty string");
  }
  h.master_addr = addr->get<std::string>();
  const auto port = j.find("master_port");
  if (port == j.end() || !port->is_number_integer() || port->get<int64_t>() < 1 ||
      port->get<int64_t>() > 65535) {
    return bad("\"master_port\" must be an integer in 1-65535");
  }
  h.master_port = static_cast<int>(port->get<int64_t>());
  return h;
}

int64_t SnapshotOffset(const std::vector<uint64_t>& hosts, int64_t cp) {
  const int64_t world = int64_t(hosts.size());
  if (world <= 1) return 0;
  const auto shared = [&](int64_t offset) {  // ranks whose buddy is on their own host
    int64_t n = 0;
    for (int64_t r = 0; r < world; ++r)
      n += hosts[size_t(r)] == hosts[size_t((r + offset) % world)];
    return n;
  };
  // The same place in the next CP group first, then in the groups after it, then any other rank.
  std::vector<int64_t> order;
  cp = std::max<int64_t>(cp, 1);
  for (int64_t o = cp; o < world; o += cp) order.push_back(o);
  for (int64_t o = 1; o < world; ++o) {
    if (o % cp != 0) order.push_back(o);
  }
  int64_t best = order.front(), fewest = shared(best);
  for (int64_t o : order) {
    if (fewest == 0) break;
    if (const int64_t n = shared(o); n < fewest) best = o, fewest = n;
  }
  // Every offset shares as much (e.g. one host): the preferred place.
  return best;
}

int64_t SnapshotBuddy(int64_t rank, int64_t world, int64_t offset) {
  if (world <= 1) return rank;
  return (rank + offset) % world;
}

int64_t SnapshotSource(int64_t rank, int64_t world, int64_t offset) {
  if (world <= 1) return rank;
  return (rank - offset % world + world) % world;
}

absl::Status WriteHealInstruction(const std::string& path, const HealInstruction& instruction) {
  const std::string tmp = path + ".tmp";
  const std::string text = instruction.ToJson() + "\n";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the heal instruction '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
