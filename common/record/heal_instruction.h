// The heal instruction: how the agent tells a running trainer to rejoin its job in place after a
// peer was lost (checkpoint.memory_interval; worker/trainer/memory_snapshots.h). The agent writes
// it, as one JSON object, to the file $RINGTRAIN_CONTROL_FILE names (a temporary file renamed into
// place, so the trainer never reads half of it); the trainer, waiting after a failed collective,
// reads it and rendezvous again at the new address as member of `generation`. A replacement
// trainer gets the same facts on its command line and `RINGTRAIN_HEAL_GENERATION`.
//
//   {"generation": 1, "master_addr": "10.0.0.5", "master_port": 29517}
#ifndef RINGTRAIN_COMMON_RECORD_HEAL_INSTRUCTION_H_
#define RINGTRAIN_COMMON_RECORD_HEAL_INSTRUCTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

struct HealInstruction {
  // 1 for the first heal of a run, 2 for the next, …: a trainer takes an instruction only for a
  // generation newer than the one it is in (0 at start).
  int64_t generation = 0;
  std::string master_addr;  // the new rendezvous (rank 0's store), as at start
  int master_port = 0;

  std::string ToJson() const;  // one line, without the newline
};

// INVALID_ARGUMENT naming what is wrong: not a JSON object, a generation < 1, an empty address, a
// port outside 1-65535.
absl::StatusOr<HealInstruction> ParseHealInstruction(absl::string_view json);

// Rank r's in-memory snapshot copies go to rank (r + offset) % world, its buddy. The offset is
// chosen once, when the run starts, from every rank's host (`hosts[r]`, an identity such as a hash
// of the node's name): the same place in the next data-parallel replica (or FSDP group) — `cp`
// ranks on — when the world has more than one CP group, else the next rank; but when that puts a
// rank's copy on its own host and another offset does not (a host holds several ranks, as a node
// with 8 GPUs does), the first offset that puts the fewest copies on their own host: a lost host
// then loses no rank together with its copy. 0 for a world of 1. The trainers report the offset
// in their step records, so the coordinator that decides whether a loss can be healed uses the
// very buddy the trainers use.
int64_t SnapshotOffset(const std::vector<uint64_t>& hosts, int64_t cp);
// The rank that holds rank `rank`'s copies (its buddy); rank itself for a world of 1.
int64_t SnapshotBuddy(int64_t rank, int64_t world, int64_t offset);
// The rank whose copies rank `rank` holds: SnapshotBuddy's inverse.
int64_t SnapshotSource(int64_t rank, int64_t world, int64_t offset);

// Writes `instruction` to `path` atomically (path.tmp, then rename). UNAVAILABLE naming the file.
absl::Status WriteHealInstruction(const std::string& path, const HealInstruction& instruction);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_RECORD_HEAL_INSTRUCTION_H_
