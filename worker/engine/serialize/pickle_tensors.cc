#include "worker/engine/serialize/pickle_tensors.h"

#include <cstdint>
#include <unordered_map>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace serialize_internal {
namespace {

// Geometry beyond this is corruption, not a tensor anyone saved.
constexpr size_t kMaxDims = 64;

// How much larger than their storages the copies of a dict's views may be, all together. Only views
// that repeat elements (stride 0, as expand() makes) grow when copied, and a 2 KB file can claim
// terabytes that way; an allocation the machine can just make would then fill its memory.
constexpr uint64_t kMaxViewGrowthBytes = uint64_t{1} << 30;

bool ToInts(const Value& tuple, std::vector<int64_t>* out) {
  if (tuple.kind != Kind::kTuple || tuple.items.size() > kMaxDims) return false;
  for (const ValuePtr& item : tuple.items) {
    if (item->kind != Kind::kInt || item->number < 0) return false;
    out->push_back(item->number);
  }
  return true;
}

}  // namespace

absl::Status LoadStorage(const std::string& key, const StorageLoader& load, const OpErrors& errors,
                         Value* storage) {
  const at::ScalarType dtype = storage->dtype;
  const int64_t numel = storage->number;
  storage->text = key;  // replaced by the record's path once read
  auto options = at::TensorOptions().dtype(dtype);
  const int64_t item_size = static_cast<int64_t>(c10::elementSize(dtype));
  if (numel > INT64_MAX / item_size) {
    return errors.Corrupt(absl::StrCat("storage '", key, "' too large"));
  }
  const int64_t needed = numel * item_size;
  if (needed == 0) {
    // Nothing to read; an empty record is not worth a round trip to the archive.
    storage->tensor = at::empty({0}, options);
    return absl::OkStatus();
  }
  RT_ASSIGN_OR_RETURN(StorageRecord record, load(key));
  storage->text = record.path;
  options = options.device(record.bytes.device());
  if (record.bytes.nbytes() < static_cast<size_t>(needed)) {
    return absl::DataLossError(absl::StrCat(
        "record '", record.path, "' holds ", record.bytes.nbytes(), " bytes, but storage '", key,
        "' needs ", needed, " (", numel, " x ", c10::toString(dtype), ")"));
  }
  storage->tensor = at::empty({0}, options).set_(record.bytes, 0, {numel}, {1});
  return absl::OkStatus();
}

// Geometry is checked against the storage before any view is made: a view must never reach past
// the bytes that were read.
absl::StatusOr<at::Tensor> RebuildTensorV2(const std::vector<ValuePtr>& a, const OpErrors& errors) {
  if (a.size() != 6 && a.size() != 7) {
    return errors.Unsupported(absl::StrCat("_rebuild_tensor_v2 with ", a.size(), " arguments"));
  }
  std::vector<int64_t> sizes, strides;
  if (a[0]->kind != Kind::kStorage || a[1]->kind != Kind::kInt || a[1]->number < 0 ||
      !ToInts(*a[2], &sizes) || !ToInts(*a[3], &strides) || sizes.size() != strides.size() ||
      a[4]->kind != Kind::kBool || a[5]->kind != Kind::kDict ||
      (a.size() == 7 && a[6]->kind != Kind::kDict && a[6]->kind != Kind::kNone)) {
    return errors.Corrupt(
        "_rebuild_tensor_v2 needs (storage, offset >= 0, size, stride, bool, dict)");
  }
  const Value& storage = *a[0];
  const int64_t offset = a[1]->number;
  // Even an empty tensor's non-zero sizes must multiply without overflow: LibTorch computes its
  // strides from them.
  int64_t span = 1;
  int64_t last = offset;  // index of the furthest element the view touches
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t reach = 0;
    if (sizes[d] == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(span, sizes[d], &span) ||
               __builtin_mul_overflow(sizes[d] - 1, strides[d], &reach) ||
               __builtin_add_overflow(last, reach, &last)) {
      return errors.Corrupt("tensor size or stride overflows");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(span, storage.tensor.element_size(), &bytes)) {
    return errors.Corrupt("tensor size overflows");
  }
  if (empty) return at::empty(sizes, storage.tensor.options());
  if (last >= storage.number) {
    return absl::DataLossError(absl::StrCat("a tensor reaches element ", last, " of storage '",
                                            storage.text, "', which holds only ", storage.number));
  }
  return storage.tensor.as_strided(sizes, strides, offset);
}

absl::StatusOr<StateDict> DictEntries(const Value& top) {
  if (top.kind != Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat("the file holds a ", Describe(top), ", not a dict of name -> tensor"));
  }
  StateDict out;
  for (size_t i = 0; i < top.items.size(); i += 2) {
    const Value& key = *top.items[i];
    const Value& value = *top.items[i + 1];
    if (key.kind != Kind::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat("dict key #", i / 2, " is a ", Describe(key), ", not a str"));
    }
    if (value.kind != Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat("entry '", absl::CHexEscape(key.text),
                                                     "' is a ", Describe(value), ", not a tensor"));
    }
    out.emplace_back(key.text, value.tensor);
  }
  return out;
}

absl::Status MaterializeStateDict(StateDict& out) {
  std::unordered_map<const c10::StorageImpl*, int> uses;
  for (const auto& entry : out) ++uses[entry.second.storage().unsafeGetStorageImpl()];
  // A tensor may keep its record's memory only when it is the sole, exact, dense user of it;
  // otherwise in-place updates to one entry would show through another.
  uint64_t growth = 0;
  for (auto& [name, tensor] : out) {
    const bool owns =
        uses[tensor.storage().unsafeGetStorageImpl()] == 1 && tensor.is_contiguous() &&
        tensor.storage_offset() == 0 &&
        tensor.storage().nbytes() == static_cast<size_t>(tensor.numel()) * tensor.element_size();
    if (owns) continue;
    const uint64_t copy_bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    const uint64_t stored_bytes = tensor.storage().nbytes();
    if (copy_bytes > stored_bytes) growth += copy_bytes - stored_bytes;
    if (growth > kMaxViewGrowthBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot materialize '", absl::CHexEscape(name), "' (", tensor.numel(),
          " elements): views that repeat their storage's elements (stride 0) may add at most ",
          kMaxViewGrowthBytes >> 20, " MiB to a state dict when copied"));
    }
    try {
      tensor = tensor.clone(at::MemoryFormat::Contiguous);
    } catch (const c10::Error& e) {
      // A stride-0 view (an expand()) can be far larger than its storage: a legitimate file may
      // still not fit, and a hostile one can claim 2^62 elements.
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot materialize '", absl::CHexEscape(name), "' (", tensor.numel(),
                       " elements): ", e.what_without_backtrace()));
    }
  }
  return absl::OkStatus();
}

}  // namespace serialize_internal
}  // namespace ringtrain
