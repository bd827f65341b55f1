// A job config small enough to validate in microseconds, for the coordinator's unit tests (they
// never run it).
#ifndef RINGTRAIN_TESTS_UNIT_TINY_JOB_CONFIG_H_
#define RINGTRAIN_TESTS_UNIT_TINY_JOB_CONFIG_H_

namespace ringtrain {

// A valid one-layer config of 3 steps (the tests never run it).
inline constexpr char kTinyJobConfig[] = R"(
[model]
dim = 64
n_layers = 1
n_heads = 4
n_kv_heads = 2
vocab_size = 64
multiple_of = 32
max_seq_len = 256
[training]
seq_len = 64
local_batch_size = 2
steps = 3
[lr_scheduler]
warmup_steps = 0
)";

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_TINY_JOB_CONFIG_H_
