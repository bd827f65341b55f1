#include "common/record/heal_instruction.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

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

namespace {
int64_t BuddyOffset(int64_t world, int64_t cp) { return world > cp ? cp : 1; }
}  // namespace

int64_t SnapshotBuddy(int64_t rank, int64_t world, int64_t cp) {
  if (world <= 1) return rank;
  return (rank + BuddyOffset(world, cp)) % world;
}

int64_t SnapshotSource(int64_t rank, int64_t world, int64_t cp) {
  if (world <= 1) return rank;
  return (rank - BuddyOffset(world, cp) + world) % world;
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
