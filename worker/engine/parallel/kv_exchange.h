// How ring attention's K/V blocks reach every rank of the ring, and how each block's dK/dV gets
// back to the rank that owns it: the two rotate methods as two strategies behind one loop. The
// ring is the CP group, or with hybrid context parallelism one ring across the Ulysses groups
// (RingMembers); below, cp and cp rank are the ring's size and a rank's place in it.
//
// A pass (forward or backward) visits cp steps; at step s this rank holds the block of cp rank
// RingSource(s) = (cp_rank − s) mod cp. The loop is, for each step:
//   Prefetch(s) → compute with Block(s) → [backward: AddBlockGrad(s, dkv)] → Advance(s)
// and, after a backward pass, FinishGrads(own_rest) gives this rank's own block's summed gradient.
//
//   alltoall   the block moves to the next rank each step (async send/recv, issued before the
//              step's compute so the two overlap); in backward, each block's dK/dV accumulator
//              travels with it and arrives home after the last step.
//   allgather  one all-gather of every block up front; in backward the per-block gradients are
//              reduce-scattered with one all-to-all and summed in ring order.
// Both sum a block's gradient in the same order (the owner's step-0 contribution first, then ring
// order, then the owner's rest), so the two methods agree bitwise.
//
// Blocks no query of a rank can see (BlockNeeds: the mask — causal, or packed documents — decides
// from the batch's layout) are not computed there (ring_attention.cc), and not sent where the
// method allows: allgather sends each block only to the ranks that need it, and its dK/dV only
// from them; alltoall forwards a block only as far round the ring as a rank still needs it, and a
// block's dK/dV accumulator goes round only when some other rank needed the block.
//
// Blocks are (2, B, Hk, Lc, D): K and V stacked. Failures throw CommError naming the peer.
//
// Every Advance, AddBlockGrad and FinishGrads of alltoall, and every Begin and FinishGrads of
// allgather, is a point that may wait, with one entry in CommStats::ring_waits whether it waited
// or not, so the ranks of a ring record the same sequence.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_KV_EXCHANGE_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_KV_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/Tensor.h>

#include "common/config/choices.h"
#include "worker/engine/parallel/comm.h"

namespace ringtrain {

// The cp rank whose block `cp_rank` holds at ring step `step`.
inline int64_t RingSource(int64_t cp_rank, int64_t cp, int64_t step) {
  return ((cp_rank - step) % cp + cp) % cp;
}

// needs[dst][src]: whether some query of cp rank dst sees some key of cp rank src's block. The
// diagonal is always true (a token sees itself).
using BlockNeeds = std::vector<std::vector<bool>>;

class KvExchange {
 public:
  virtual ~KvExchange() = default;
  // Starts a pass from this rank's own block `kv`; forgets the previous pass. `needs` (the same
  // on every rank of the group, kept until the next Begin) says which blocks go where.
  virtual void Begin(const at::Tensor& kv, const BlockNeeds& needs) = 0;
  // Before step `step`'s compute: starts what the next step needs.
  virtual void Prefetch(int64_t step) = 0;
  // The block held at `step` (defined when this rank needs it); valid until Advance(step).
  virtual const at::Tensor& Block(int64_t step) = 0;
  // After step `step`'s compute: waits until the next step's block is here.
  virtual void Advance(int64_t step) = 0;
  // Backward, at every step: this rank's contribution dkv to the gradient of the block held at
  // `step`; undefined when it computed none (the block was hidden from it).
  virtual void AddBlockGrad(int64_t step, const at::Tensor& dkv) = 0;
  // Backward, after the last step: the gradient of this rank's own block, summed over the group,
  // with `own_rest` (this rank's contribution to its own block computed after the last step, to
  // hide the last dK/dV hop; undefined: none) added last.
  virtual at::Tensor FinishGrads(const at::Tensor& own_rest) = 0;
};

// The ranks the blocks go round: a group of the communicator and this rank's place in it.
struct RingMembers {
  // Which of the communicator's groups, looked up at each use: a heal rebuilds the groups
  // (Communicator::Rejoin), and a pointer to the old one would dangle.
  c10d::ProcessGroup& (Communicator::*group)() = nullptr;
  int64_t size = 1;
  int64_t rank = 0;
  const char* member = "cp rank";  // how errors name a peer: "cp rank 1", "ring rank 1"

  // The ring of `comm`'s mesh: its CP group (ring attention), or with Ulysses groups
  // (mesh().ulysses > 1) the ring across them that this rank's Ulysses rank belongs to.
  static RingMembers Of(Communicator& comm);
};

// The exposed transfer time of the ring of `comm` (RingMembers::Of) so far (since
// CommStats::Reset): for each point of comm.stats().ring_waits, the least wait over the ring's
// ranks, summed. A rank waits at a point for a peer still computing (the peer's lateness) or for
// bytes on their way. The last rank to reach a point finds every transfer to it already started,
// so all of its wait is transfer that compute did not hide; the least wait over the ranks is at
// most that, and leaves lateness out: lateness makes some ranks wait, never the late one.
// Collective over the ring: every member calls it after the same points. 0 without a ring (one
// member). Throws CommError.
double ExposedRingTransfer(Communicator& comm);

// `comm` must outlive the exchange; `ring` names the group that carries the blocks.
std::unique_ptr<KvExchange> MakeKvExchange(RotateMethod method, Communicator* comm,
                                           const RingMembers& ring);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_KV_EXCHANGE_H_
