#include "worker/engine/serialize/pickle_value.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace serialize_internal {
namespace {

constexpr KnownGlobal kKnownGlobals[] = {
    {"collections.OrderedDict", Callable::kOrderedDict, at::kFloat},
    {"torch._utils._rebuild_tensor_v2", Callable::kRebuildTensorV2, at::kFloat},
    {"torch._utils._rebuild_parameter", Callable::kRebuildParameter, at::kFloat},
    // LibTorch's Pickler wraps typed containers as restore_type_tag(obj, "Dict[str, Tensor]").
    {"torch.jit._pickle.restore_type_tag", Callable::kRestoreTypeTag, at::kFloat},
    {"torch.FloatStorage", Callable::kStorageType, at::kFloat},
    {"torch.DoubleStorage", Callable::kStorageType, at::kDouble},
    {"torch.HalfStorage", Callable::kStorageType, at::kHalf},
    {"torch.BFloat16Storage", Callable::kStorageType, at::kBFloat16},
    {"torch.LongStorage", Callable::kStorageType, at::kLong},
    {"torch.IntStorage", Callable::kStorageType, at::kInt},
    {"torch.ShortStorage", Callable::kStorageType, at::kShort},
    {"torch.CharStorage", Callable::kStorageType, at::kChar},
    {"torch.ByteStorage", Callable::kStorageType, at::kByte},
    {"torch.BoolStorage", Callable::kStorageType, at::kBool},
    {"torch.ComplexFloatStorage", Callable::kStorageType, at::kComplexFloat},
    {"torch.ComplexDoubleStorage", Callable::kStorageType, at::kComplexDouble},
};

}  // namespace

const KnownGlobal* FindKnownGlobal(absl::string_view name) {
  for (const KnownGlobal& known : kKnownGlobals) {
    if (name == known.name) return &known;
  }
  return nullptr;
}

// A hostile pickle can nest values a million deep; dropping them recursively would overflow the
// C++ stack, so children whose last owner this is are unlinked iteratively.
Value::~Value() {
  std::vector<ValuePtr> pending = std::move(items);
  while (!pending.empty()) {
    ValuePtr value = std::move(pending.back());
    pending.pop_back();
    if (value != nullptr && value.use_count() == 1) {
      for (ValuePtr& child : value->items) pending.push_back(std::move(child));
      value->items.clear();
    }
  }
}

std::string Describe(const Value& v) {
  switch (v.kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kGlobal: return absl::StrCat("global ", v.text);
    case Kind::kStorage: return "storage";
    case Kind::kTensor: return "tensor";
  }
  return "unknown";
}

absl::Status OpErrors::Corrupt(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat("malformed pickle at byte ", op_offset, ": ", what));
}

absl::Status OpErrors::Unsupported(absl::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pickle content at byte ", op_offset, ": ", what));
}

}  // namespace serialize_internal
}  // namespace ringtrain
