#include "worker/trainer/heal.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/record/heal_instruction.h"
#include "common/status_macros.h"
#include "common/trainer_exit.h"
#include "worker/trainer/heal_plan.h"

namespace ringtrain::trainer_internal {
namespace {

using Clock = std::chrono::steady_clock;

// This rank's host, for choosing buddies on other hosts: $RINGTRAIN_NODE_NAME when set (the
// Kubernetes manifests set it to the node's name: pods on one node have their own host names),
// else the host name; hashed (FNV-1a) to 48 bits, which a double all-gather carries exactly.
uint64_t HostId() {
  std::string name;
  if (const char* node = std::getenv("RINGTRAIN_NODE_NAME"); node != nullptr && *node != 0) {
    name = node;
  } else {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    name = host;
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h & ((uint64_t{1} << 48) - 1);
}

// $RINGTRAIN_SNAPSHOT_TRANSPORT: "auto" (the default: buddies on one host share their snapshot
// buffers, others send them) or "network" (every copy is sent).
absl::StatusOr<bool> SharedBuffersAllowed() {
  const char* value = std::getenv("RINGTRAIN_SNAPSHOT_TRANSPORT");
  if (value == nullptr || *value == 0 || std::string(value) == "auto") return true;
  if (std::string(value) == "network") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("RINGTRAIN_SNAPSHOT_TRANSPORT=", value, ": expected auto or network"));
}

// Shared snapshot buffers with the buddy and the source where they are on this rank's host
// (`hosts`: every rank's HostId) and the transport allows it; warns when this rank's offer failed.
// `populate`: see MemorySnapshots::ShareOnHost.
absl::Status ShareSnapshotBuffers(Trainer::State& s, const std::vector<double>& hosts,
                                  bool populate) {
  RT_ASSIGN_OR_RETURN(const bool allowed, SharedBuffersAllowed());
  MemorySnapshots& snapshots = *s.snapshots;
  const int64_t me = s.rank.rank, world = s.rank.world_size;
  const int64_t buddy = SnapshotBuddy(me, world, s.snapshot_offset);
  const int64_t source = SnapshotSource(me, world, s.snapshot_offset);
  const auto on_host = [&](int64_t r) { return allowed && hosts[size_t(r)] == hosts[size_t(me)]; };
  std::string why;
  // Snapshots every step keep three at once (heal.h: the committed one, the one sent last step and
  // the new one); two otherwise.
  const int slots = s.config.checkpoint.memory_interval == 1 ? 3 : 2;
  snapshots.ShareOnHost(on_host(buddy), on_host(source), slots, populate, &why);
  if (!why.empty()) {
    RT_LOG(Warning) << "rank " << me << ": its snapshots go to rank " << buddy
                    << " over the network, not through shared memory on this host: " << why;
  }
  return absl::OkStatus();
}

// Tags of a replacement's copy, sent by its buddy on the snapshot group.
constexpr int kHealFlatTag = 11;
constexpr int kHealRngTag = 12;
constexpr int kHealMetaTag = 13;

// How long a survivor waits for the heal instruction before it gives up (exit 3, a lost peer):
// the coordinator first has to find the cause, stop a hung rank and start a replacement.
std::chrono::milliseconds HealWait(const Trainer::State& s) {
  const double seconds = std::max(60.0, 3 * s.config.comm.timeout_seconds);
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// The instruction in the control file when it is for a newer generation than this rank's; an
// error for a file that does not parse (the caller warns once, not at every poll).
absl::StatusOr<std::optional<HealInstruction>> ReadInstruction(const Trainer::State& s) {
  std::ifstream in(s.control_file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  RT_ASSIGN_OR_RETURN(HealInstruction h, ParseHealInstruction(text.str()));
  if (h.generation <= s.generation) return std::nullopt;
  return h;
}

RendezvousOptions Rendezvous(const Trainer::State& s, const std::string& addr, int port) {
  RendezvousOptions options{
      addr, port, std::chrono::milliseconds(int64_t(s.config.comm.timeout_seconds * 1000)),
      s.device, s.config.comm.backend};
  options.snapshot_group = true;
  return options;
}

void Wait(c10::intrusive_ptr<c10d::Work> work, const Trainer::State& s) {
  work->wait(s.comm->timeout());
}

// The buddy sends the replacement `copy`; the replacement receives its own snapshot.
void TransferCopy(Trainer::State& s, const Snapshot* copy, int64_t to, int64_t from,
                  Snapshot* received) {
  c10d::ProcessGroup& group = s.comm->snapshot_group();
  if (copy != nullptr) {
    std::vector<at::Tensor> flat = {copy->flat}, rng = {copy->rng_state};
    std::vector<at::Tensor> meta = {at::tensor({copy->step, copy->optimizer_step}, at::kLong)};
    Wait(group.send(flat, int(to), kHealFlatTag), s);
    Wait(group.send(rng, int(to), kHealRngTag), s);
    Wait(group.send(meta, int(to), kHealMetaTag), s);
  }
  if (received != nullptr) {
    received->flat = s.snapshots->NewFlat(s.snapshots->elements());
    received->rng_state = at::empty({s.snapshots->rng_bytes()}, at::kByte);
    at::Tensor meta_in = at::empty({2}, at::kLong);
    std::vector<at::Tensor> flat = {received->flat}, rng = {received->rng_state}, meta = {meta_in};
    Wait(group.recv(flat, int(from), kHealFlatTag), s);
    Wait(group.recv(rng, int(from), kHealRngTag), s);
    Wait(group.recv(meta, int(from), kHealMetaTag), s);
    received->step = meta_in[0].item<int64_t>();
    received->optimizer_step = meta_in[1].item<int64_t>();
  }
}

// Every rank of the new generation: agree on the step, hand the replacements their copies, and
// roll back to it. Returns the step.
absl::StatusOr<int64_t> AgreeAndRestore(Trainer::State& s, bool survivor) {
  MemorySnapshots& snapshots = *s.snapshots;
  HealRow mine;
  mine.survivor = survivor;
  mine.flat_elements = double(snapshots.elements());
  mine.rng_bytes = double(snapshots.rng_bytes());
  mine.own_steps = snapshots.own_steps();
  mine.held_steps = snapshots.held_steps();
  mine.tag_pid = s.tag_pid;
  mine.tag_ms = s.tag_ms;
  mine.buddy_offset = s.snapshot_offset;
  mine.host_id = double(HostId());
  std::vector<HealRow> rows;
  RT_RETURN_IF_ERROR(Guarded(s, "agreeing on the heal", [&]() -> absl::Status {
    for (const std::vector<double>& r : s.comm->AllGatherDoubles(HealRowToDoubles(mine))) {
      RT_ASSIGN_OR_RETURN(HealRow row, HealRowFromDoubles(r));
      rows.push_back(std::move(row));
    }
    return absl::OkStatus();
  }));
  const int64_t world = s.rank.world_size, me = s.rank.rank;
  const std::optional<int64_t> offset = RunBuddyOffset(rows);
  const std::optional<int64_t> step = offset ? ChooseRollbackStep(rows, *offset) : std::nullopt;
  if (!step) {
    return MarkPeerLost(absl::UnavailableError(
        "no in-memory snapshot every rank can restore (none taken yet, or a replacement's buddy "
        "was lost too); the job must restart from storage"));
  }
  RT_RETURN_IF_ERROR(Guarded(s, "handing over the snapshots", [&]() -> absl::Status {
    for (int64_t n = 0; n < world; ++n) {
      if (rows[size_t(n)].survivor) continue;
      const int64_t holder = SnapshotBuddy(n, world, *offset);
      if (holder == me) TransferCopy(s, snapshots.Held(*step), n, -1, nullptr);
      if (n == me) {
        Snapshot received;
        TransferCopy(s, nullptr, -1, holder, &received);
        snapshots.AdoptOwn(std::move(received));
      }
    }
    return absl::OkStatus();
  }));
  const Snapshot* own = snapshots.Own(*step);
  if (own == nullptr) return absl::InternalError("the agreed snapshot is missing on this rank");
  snapshots.Restore(*own);
  s.gradients->set_optimizer_step(own->optimizer_step);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(own->rng_state);
  s.train_state.step = *step;
  s.train_state.global_sample = *step * s.sampler->global_batch();
  s.train_state.optimizer_step = own->optimizer_step;
  snapshots.ForgetAfter(*step);
  s.snapshot_offset = *offset;
  const int64_t source = SnapshotSource(me, world, *offset);
  snapshots.SetPeers(SnapshotBuddy(me, world, *offset), source,
                     int64_t(rows[size_t(source)].flat_elements),
                     int64_t(rows[size_t(source)].rng_bytes));
  // Shared buffers with the new members (a replacement is another process; a survivor offers the
  // buffers it has). A replacement's new buffers are not populated: the heal waits for it, and the
  // first snapshot's copy faults their pages in instead.
  std::vector<double> hosts;
  for (const HealRow& row : rows) hosts.push_back(row.host_id);
  RT_RETURN_IF_ERROR(Guarded(s, "sharing the snapshot buffers again",
                             [&] { return ShareSnapshotBuffers(s, hosts, /*populate=*/false); }));
  // A replacement holds only the copy it received: its next snapshots' buffers are written now,
  // as at a normal start, not faulted in by their first copy and transfer.
  if (!survivor) snapshots.PrepareBuffers(/*own=*/1);
  s.tag_pid = rows[0].tag_pid;
  s.tag_ms = rows[0].tag_ms;
  return *step;
}

}  // namespace

absl::Status StartSnapshots(Trainer::State& s) {
  const int64_t k = s.config.checkpoint.memory_interval;
  if (k <= 0 || !s.comm) return absl::OkStatus();
  const int64_t world = s.rank.world_size, me = s.rank.rank;
  s.snapshots = std::make_unique<MemorySnapshots>(s.comm.get(), s.gradients->StateTensors());
  if (s.rank.heal_generation > 0) return absl::OkStatus();  // peers and sizes come with the heal
  return Guarded(s, "choosing the snapshot buddies", [&]() -> absl::Status {
    const std::vector<std::vector<double>> rows = s.comm->AllGatherDoubles(
        {double(s.snapshots->elements()), double(s.snapshots->rng_bytes()), double(HostId())});
    std::vector<uint64_t> hosts;
    for (const std::vector<double>& row : rows) hosts.push_back(uint64_t(row[2]));
    s.snapshot_offset = SnapshotOffset(hosts, s.mesh.cp);
    const int64_t buddy = SnapshotBuddy(me, world, s.snapshot_offset);
    const int64_t source = SnapshotSource(me, world, s.snapshot_offset);
    s.snapshots->SetPeers(buddy, source, int64_t(rows[size_t(source)][0]),
                          int64_t(rows[size_t(source)][1]));
    std::vector<double> host_ids;
    for (uint64_t h : hosts) host_ids.push_back(double(h));
    RT_RETURN_IF_ERROR(ShareSnapshotBuffers(s, host_ids, /*populate=*/true));
    s.snapshots->PrepareBuffers();
    if (me == 0) {
      const int64_t hosts_count = int64_t(std::set<uint64_t>(hosts.begin(), hosts.end()).size());
      std::string where = ", on another host";
      if (s.snapshots->shares_with_buddy()) {
        where = ", on the same host, through shared memory";
      } else if (hosts[size_t(buddy)] == hosts[0]) {
        where = ", on the same host, over the network";
      }
      RT_LOG(Info) << absl::StrFormat(
          "in-memory snapshots every %d steps: each rank keeps its state (rank 0: %.1f MB) and "
          "holds the copy of the rank %d places before it (%d host%s; rank 0's copy goes to rank "
          "%d%s)",
          k, double(s.snapshots->elements()) * 4 / 1e6, s.snapshot_offset, hosts_count,
          hosts_count == 1 ? "" : "s", buddy, where);
    }
    return absl::OkStatus();
  });
}

bool SnapshotDue(const Trainer::State& s, int64_t step) {
  return s.snapshots && step % s.config.checkpoint.memory_interval == 0 &&
         step < s.config.training.steps;
}

std::vector<at::Tensor> StageSnapshot(Trainer::State& s, int64_t step) {
  return SnapshotDue(s, step) ? s.snapshots->Stage(step) : std::vector<at::Tensor>{};
}

absl::Status MaybeSnapshot(Trainer::State& s, int64_t step) {
  if (!s.snapshots) return absl::OkStatus();
  return Guarded(s, absl::StrCat("snapshot of step ", step), [&]() -> absl::Status {
    s.snapshots->Settle();
    if (SnapshotDue(s, step)) s.snapshots->Take(step, s.gradients->optimizer_step());
    return absl::OkStatus();
  });
}

bool HealInstructionCame(const Trainer::State& s) {
  if (!s.snapshots || s.control_file.empty()) return false;
  absl::StatusOr<std::optional<HealInstruction>> read = ReadInstruction(s);
  return read.ok() && read->has_value();
}

absl::StatusOr<int64_t> HealInPlace(Trainer::State& s, const absl::Status& failure) {
  if (!s.snapshots || !IsPeerLost(failure) || s.control_file.empty()) return failure;
  s.snapshots->Abandon();
  s.gradients->AbandonStep();
  const auto wait = HealWait(s);
  RT_LOG(Warning) << "rank " << s.rank.rank << ": " << failure.message() << "; waiting up to "
                  << wait.count() / 1000
                  << " s to be healed in place from the in-memory snapshots (steps "
                  << absl::StrJoin(s.snapshots->own_steps(), ", ") << ")";
  const progress::ScopedPhase waiting(progress::Phase::kWait);
  const auto start = Clock::now();
  std::optional<HealInstruction> heal;
  std::string warned;  // the last malformed control file's error, logged once
  while (Clock::now() - start < wait) {
    absl::StatusOr<std::optional<HealInstruction>> read = ReadInstruction(s);
    if (read.ok() && (heal = *read)) break;
    if (!read.ok() && read.status().message() != warned) {
      warned = std::string(read.status().message());
      RT_LOG(Warning) << s.control_file << ": " << warned << " (still waiting for a valid one)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!heal) {
    return absl::Status(failure.code(),
                        absl::StrCat(failure.message(), "; no heal instruction came within ",
                                     wait.count() / 1000, " s"));
  }
  RT_LOG(Info) << "rank " << s.rank.rank << ": rejoining as generation " << heal->generation
               << " at " << heal->master_addr << ":" << heal->master_port;
  RT_RETURN_IF_ERROR(s.comm->Rejoin(Rendezvous(s, heal->master_addr, heal->master_port)));
  s.generation = heal->generation;
  RT_ASSIGN_OR_RETURN(const int64_t step, AgreeAndRestore(s, /*survivor=*/true));
  RT_LOG(Info) << absl::StrFormat(
      "rank %d healed in place (generation %d, %.2f s after the failure): rolled back to the "
      "step %d snapshot",
      s.rank.rank, s.generation, std::chrono::duration<double>(Clock::now() - start).count(), step);
  return step;
}

absl::StatusOr<int64_t> JoinAsReplacement(Trainer::State& s) {
  if (!s.snapshots) {
    return absl::FailedPreconditionError(
        "started as a replacement (RINGTRAIN_HEAL_GENERATION) but checkpoint.memory_interval is 0");
  }
  s.generation = s.rank.heal_generation;
  RT_ASSIGN_OR_RETURN(const int64_t step, AgreeAndRestore(s, /*survivor=*/false));
  if (s.config.checkpoint.enable) OpenCheckpointWriter(s);  // under the run's save tag
  RT_LOG(Info) << "rank " << s.rank.rank << " replaces the lost rank (generation " << s.generation
               << "): its state is the step " << step << " snapshot, from rank "
               << SnapshotBuddy(s.rank.rank, s.rank.world_size, s.snapshot_offset);
  return step;
}

}  // namespace ringtrain::trainer_internal
