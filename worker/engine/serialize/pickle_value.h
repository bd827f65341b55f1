// Private to serialize/: the values of the strict unpickler (pickle_reader.h) — a small tagged
// struct rather than a class per Python type — and the error helpers every part of it shares, so a
// message always names the byte offset of the opcode being run.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_VALUE_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringtrain {
namespace serialize_internal {

enum class Kind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

// What a REDUCE may call. Anything else is refused when its GLOBAL is read.
enum class Callable {
  kOrderedDict,
  kRebuildTensorV2,
  kRebuildParameter,
  kRestoreTypeTag,
  kStorageType
};

// A GLOBAL a state dict may name, and what calling it (REDUCE) means.
struct KnownGlobal {
  const char* name;  // "module.name"
  Callable callable;
  at::ScalarType dtype;  // for kStorageType
};

// The entry for `name` ("torch.FloatStorage"), or nullptr when a state dict may not name it.
const KnownGlobal* FindKnownGlobal(absl::string_view name);

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// Values are shared (the memo and the stack may hold one twice) and may form cycles through the
// memo; the unpickler that made them breaks those when it ends.
struct Value {
  explicit Value(Kind k) : kind(k) {}
  ~Value();
  Kind kind;
  int64_t number = 0;  // kBool (0/1), kInt; kStorage: its element count
  double real = 0;     // kFloat
  std::string text;    // kString; kGlobal: "module.name"; kStorage: its record path
  // kTuple, kList: the elements. kDict: key0, value0, key1, value1, … in insertion order.
  std::vector<ValuePtr> items;
  // kDict: index in `items` of each string key, so setting a key again keeps its place (as in
  // Python) and a large state dict stays linear to build.
  std::unordered_map<std::string, size_t> string_keys;
  Callable callable = Callable::kOrderedDict;  // kGlobal
  at::ScalarType dtype = at::kFloat;           // kGlobal of a storage type; kStorage
  at::Tensor tensor;  // kStorage: 1-D over all its elements; kTensor: the tensor (maybe a view)
};

// The Python type name for messages ("dict", "global torch.FloatStorage").
std::string Describe(const Value& v);

// Errors at the opcode that starts at byte `op_offset` of the pickle.
struct OpErrors {
  size_t op_offset = 0;
  // DATA_LOSS "malformed pickle at byte N: what".
  absl::Status Corrupt(absl::string_view what) const;
  // INVALID_ARGUMENT "unsupported pickle content at byte N: what".
  absl::Status Unsupported(absl::string_view what) const;
};

}  // namespace serialize_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_VALUE_H_
