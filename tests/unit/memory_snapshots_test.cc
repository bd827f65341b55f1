// MemorySnapshots' buffers without a communicator: a dropped snapshot's buffer is reused by the
// next one of its size (so a 1 GB snapshot is not faulted in afresh every K steps), never one a
// transfer still holds; prepared buffers are the next snapshots'; Stage hands the next buffer out
// as the state's shapes; Restore writes a snapshot back bitwise.
#include "worker/trainer/memory_snapshots.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

Snapshot Of(int64_t step, at::Tensor flat) {
  Snapshot s;
  s.step = step;
  s.flat = std::move(flat);
  return s;
}

TEST(MemorySnapshotsTest, ADroppedBufferIsReusedByTheNextSnapshotOfItsSize) {
  MemorySnapshots snapshots(nullptr, {at::zeros({3, 4}), at::zeros({5})});
  ASSERT_EQ(snapshots.elements(), 17);
  at::Tensor first = snapshots.NewFlat(17);
  const void* memory = first.data_ptr();
  snapshots.AdoptOwn(Of(3, std::move(first)));
  snapshots.AdoptOwn(Of(6, snapshots.NewFlat(17)));
  EXPECT_NE(snapshots.Own(6)->flat.data_ptr(), memory);
  snapshots.Prune(6);  // step 3 dropped
  EXPECT_EQ(snapshots.own_steps(), std::vector<int64_t>{6});
  EXPECT_EQ(snapshots.NewFlat(9).numel(), 9) << "another size: new memory";
  EXPECT_EQ(snapshots.NewFlat(17).data_ptr(), memory);
  EXPECT_NE(snapshots.NewFlat(17).data_ptr(), memory) << "taken once";
}

TEST(MemorySnapshotsTest, ABufferATransferStillHoldsIsNotReused) {
  MemorySnapshots snapshots(nullptr, {at::zeros({8})});
  snapshots.AdoptOwn(Of(3, snapshots.NewFlat(8)));
  const at::Tensor in_flight = snapshots.Own(3)->flat;  // as a Gloo send still holds it
  snapshots.ForgetAfter(0);
  EXPECT_TRUE(snapshots.own_steps().empty());
  EXPECT_NE(snapshots.NewFlat(8).data_ptr(), in_flight.data_ptr());
}

TEST(MemorySnapshotsTest, PreparedBuffersAreTheNextSnapshotsBuffers) {
  MemorySnapshots snapshots(nullptr, {at::zeros({17})});
  snapshots.SetPeers(/*buddy=*/1, /*source=*/1, /*source_elements=*/9, /*source_rng_bytes=*/4);
  snapshots.PrepareBuffers(/*own=*/1);  // as a replacement: one of its size, two of its source's
  EXPECT_EQ(snapshots.spare_bytes(), (17 + 2 * 9) * 4);
  EXPECT_EQ(snapshots.NewFlat(17).numel(), 17);
  EXPECT_EQ(snapshots.NewFlat(9).numel(), 9);
  EXPECT_EQ(snapshots.spare_bytes(), 9 * 4) << "the prepared buffers are taken, not new memory";
  EXPECT_EQ(snapshots.NewFlat(17).numel(), 17) << "none of that size left: new memory";
  EXPECT_EQ(snapshots.spare_bytes(), 9 * 4);

  MemorySnapshots normal(nullptr, {at::zeros({5})});
  normal.SetPeers(1, 1, 5, 4);
  normal.PrepareBuffers();  // a normal start: two of each
  EXPECT_EQ(normal.spare_bytes(), 4 * 5 * 4);
}

TEST(MemorySnapshotsTest, StageGivesTheNextBufferAsViewsInTheStatesOrderAndShapes) {
  MemorySnapshots snapshots(nullptr, {at::zeros({3, 4}), at::zeros({5}), at::zeros({2, 1})});
  snapshots.AdoptOwn(Of(3, snapshots.NewFlat(19)));
  const void* memory = snapshots.Own(3)->flat.data_ptr();
  snapshots.AdoptOwn(Of(6, snapshots.NewFlat(19)));
  snapshots.Prune(6);  // step 3's buffer is free again
  std::vector<at::Tensor> views = snapshots.Stage(9);
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(views[0].sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(views[1].sizes(), at::IntArrayRef({5}));
  EXPECT_EQ(views[2].sizes(), at::IntArrayRef({2, 1}));
  EXPECT_EQ(views[0].data_ptr(), memory) << "the dropped buffer, not new memory";
  EXPECT_EQ(views[1].data_ptr<float>(), views[0].data_ptr<float>() + 12);
  EXPECT_EQ(views[2].data_ptr<float>(), views[0].data_ptr<float>() + 17);
  views.clear();
  snapshots.Abandon();  // a heal drops what was staged: its buffer goes back to the spares
  EXPECT_EQ(snapshots.NewFlat(19).data_ptr(), memory);
}

TEST(MemorySnapshotsTest, RestoreWritesTheSnapshotBackBitwise) {
  at::Tensor a = at::randn({3, 4}), b = at::randn({5});
  MemorySnapshots snapshots(nullptr, {a, b});
  at::Tensor flat = snapshots.NewFlat(17);
  flat.narrow(0, 0, 12).copy_(a.reshape(-1));
  flat.narrow(0, 12, 5).copy_(b);
  const at::Tensor a0 = a.clone(), b0 = b.clone();
  a.add_(1);
  b.mul_(3);
  snapshots.Restore(Of(1, flat));
  EXPECT_TRUE(at::equal(a, a0));
  EXPECT_TRUE(at::equal(b, b0));
}

}  // namespace
}  // namespace ringtrain
