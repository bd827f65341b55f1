// A pickle virtual machine cut down to what a state dict needs. Values live in a small tagged
// struct; GLOBALs resolve at once against a fixed table, so an unknown class is refused before
// anything calls it. Every read is bounds-checked against the pickle, and the stack honours MARK
// the way CPython's metastack does (nothing below the latest mark can be popped).
#include "worker/engine/serialize/pickle_reader.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace serialize_internal {
namespace {

// Opcode values from CPython's Lib/pickle.py: protocol 2 (torch.save's default) plus the protocol-4
// framing opcodes, so pickle_protocol=4 files read too.
enum Op : uint8_t {
  kMark = '(', kStop = '.', kBinFloat = 'G', kBinInt = 'J', kBinInt1 = 'K', kBinInt2 = 'M',
  kNone = 'N', kBinPersId = 'Q', kReduce = 'R', kBinUnicode = 'X', kEmptyList = ']',
  kAppend = 'a', kBuild = 'b', kGlobal = 'c', kAppends = 'e', kBinGet = 'h', kLongBinGet = 'j',
  kBinPut = 'q', kLongBinPut = 'r', kSetItem = 's', kTuple = 't', kSetItems = 'u',
  kEmptyDict = '}', kEmptyTuple = ')', kProto = 0x80, kTuple1 = 0x85, kTuple2 = 0x86,
  kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d, kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95,
};

enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage,
                  kTensor };

// What a REDUCE may call. Anything else is refused when its GLOBAL is read.
enum class Callable { kOrderedDict, kRebuildTensorV2, kRebuildParameter, kRestoreTypeTag,
                      kStorageType };

struct KnownGlobal {
  const char* name;
  Callable callable;
  at::ScalarType dtype;  // for kStorageType
};

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

// Geometry beyond this is corruption, not a tensor anyone saved.
constexpr size_t kMaxDims = 64;

// How much larger than their storages the copies of a dict's views may be, all together. Only views
// that repeat elements (stride 0, as expand() makes) grow when copied, and a 2 KB file can claim
// terabytes that way; an allocation the machine can just make would then fill its memory.
constexpr uint64_t kMaxViewGrowthBytes = uint64_t{1} << 30;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

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

class Unpickler {
 public:
  Unpickler(absl::string_view data, const StorageLoader& load) : data_(data), load_(load) {}
  ~Unpickler();
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  absl::StatusOr<StateDict> Run();

 private:
  ValuePtr Make(Kind kind) {
    // Not make_shared: a weak_ptr would then pin the whole Value, not just the control block.
    ValuePtr value(new Value(kind));
    created_.push_back(value);
    return value;
  }
  absl::Status Step(uint8_t op);
  absl::Status Corrupt(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat("malformed pickle at byte ", op_offset_, ": ", what));
  }
  absl::Status Unsupported(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported pickle content at byte ", op_offset_, ": ", what));
  }
  absl::Status ReadBytes(uint64_t n, absl::string_view* out);
  absl::StatusOr<uint64_t> ReadUint(size_t width);  // little-endian, width <= 8
  absl::Status ReadLine(std::string* out);
  absl::Status PushString(uint64_t length);
  void Push(ValuePtr v) { stack_.push_back(std::move(v)); }
  absl::StatusOr<ValuePtr> Pop();
  absl::StatusOr<ValuePtr> Top() const;
  absl::StatusOr<std::vector<ValuePtr>> PopToMark();
  absl::Status PushTuple(size_t n);
  absl::Status PushGlobal(const std::string& module, const std::string& name);
  absl::Status SetItems(Value& dict, const std::vector<ValuePtr>& key_values);
  absl::Status Reduce();
  absl::Status PersistentLoad();
  absl::StatusOr<ValuePtr> RebuildTensor(const std::vector<ValuePtr>& args);
  absl::StatusOr<StateDict> ToStateDict(const Value& top) const;

  absl::string_view data_;
  const StorageLoader& load_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;  // start of the opcode being run, for messages
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // stack heights at each open MARK
  std::unordered_map<uint64_t, ValuePtr> memo_;
  std::unordered_map<std::string, ValuePtr> storages_;  // persistent key → kStorage
  ValuePtr result_;
  std::vector<std::weak_ptr<Value>> created_;  // every Value made, to break cycles at the end
};

// Through the memo a container can hold itself (even after the memo forgets it), and such a cycle
// would never be freed; emptying every container still alive breaks them all.
Unpickler::~Unpickler() {
  for (const std::weak_ptr<Value>& weak : created_) {
    ValuePtr value = weak.lock();
    std::vector<ValuePtr> children;
    if (value != nullptr) children.swap(value->items);
  }
}

absl::Status Unpickler::ReadBytes(uint64_t n, absl::string_view* out) {
  if (n > data_.size() - pos_) {
    return Corrupt(absl::StrCat("needs ", n, " more bytes, only ", data_.size() - pos_, " left"));
  }
  *out = data_.substr(pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Unpickler::ReadUint(size_t width) {
  absl::string_view bytes;
  RT_RETURN_IF_ERROR(ReadBytes(width, &bytes));
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  return v;
}

absl::Status Unpickler::ReadLine(std::string* out) {
  size_t end = data_.find('\n', pos_);
  if (end == absl::string_view::npos) return Corrupt("GLOBAL name runs past the end");
  out->assign(data_.data() + pos_, end - pos_);
  pos_ = end + 1;
  return absl::OkStatus();
}

absl::Status Unpickler::PushString(uint64_t length) {
  absl::string_view bytes;
  RT_RETURN_IF_ERROR(ReadBytes(length, &bytes));
  ValuePtr v = Make(Kind::kString);
  v->text = std::string(bytes);
  Push(std::move(v));
  return absl::OkStatus();
}

absl::StatusOr<ValuePtr> Unpickler::Pop() {
  size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) return Corrupt("stack underflow");
  ValuePtr v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

absl::StatusOr<ValuePtr> Unpickler::Top() const {
  size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) return Corrupt("stack underflow");
  return stack_.back();
}

absl::StatusOr<std::vector<ValuePtr>> Unpickler::PopToMark() {
  if (marks_.empty()) return Corrupt("no MARK to pop to");
  size_t mark = marks_.back();
  marks_.pop_back();
  std::vector<ValuePtr> items(std::make_move_iterator(stack_.begin() + mark),
                              std::make_move_iterator(stack_.end()));
  stack_.resize(mark);
  return items;
}

absl::Status Unpickler::PushTuple(size_t n) {
  ValuePtr tuple = Make(Kind::kTuple);
  tuple->items.resize(n);
  for (size_t i = n; i > 0; --i) {
    RT_ASSIGN_OR_RETURN(tuple->items[i - 1], Pop());
  }
  Push(std::move(tuple));
  return absl::OkStatus();
}

absl::Status Unpickler::PushGlobal(const std::string& module, const std::string& name) {
  std::string full = absl::StrCat(module, ".", name);
  for (const KnownGlobal& known : kKnownGlobals) {
    if (full != known.name) continue;
    ValuePtr v = Make(Kind::kGlobal);
    v->text = full;
    v->callable = known.callable;
    v->dtype = known.dtype;
    Push(std::move(v));
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("global '", absl::CHexEscape(full),
                                  "' (a state dict may hold only tensors, OrderedDicts and the "
                                  "torch._utils rebuild functions)"));
}

absl::Status Unpickler::SetItems(Value& dict, const std::vector<ValuePtr>& key_values) {
  if (dict.kind != Kind::kDict) return Corrupt(absl::StrCat("SETITEM on a ", Describe(dict)));
  if (key_values.size() % 2 != 0) return Corrupt("SETITEMS with an odd number of items");
  for (size_t i = 0; i < key_values.size(); i += 2) {
    const ValuePtr& key = key_values[i];
    if (key->kind == Kind::kString) {
      auto [it, inserted] = dict.string_keys.emplace(key->text, dict.items.size());
      if (!inserted) {
        dict.items[it->second + 1] = key_values[i + 1];
        continue;
      }
    }
    dict.items.push_back(key);
    dict.items.push_back(key_values[i + 1]);
  }
  return absl::OkStatus();
}

absl::Status Unpickler::Reduce() {
  RT_ASSIGN_OR_RETURN(ValuePtr args, Pop());
  RT_ASSIGN_OR_RETURN(ValuePtr callable, Pop());
  if (callable->kind != Kind::kGlobal) {
    return Unsupported(absl::StrCat("REDUCE calls a ", Describe(*callable)));
  }
  if (args->kind != Kind::kTuple) {
    return Corrupt(absl::StrCat("arguments to ", callable->text, " are a ", Describe(*args)));
  }
  const std::vector<ValuePtr>& a = args->items;
  switch (callable->callable) {
    case Callable::kOrderedDict:
      if (!a.empty()) return Unsupported("collections.OrderedDict called with arguments");
      Push(Make(Kind::kDict));
      return absl::OkStatus();
    case Callable::kRestoreTypeTag:
      if (a.size() != 2) return Corrupt("restore_type_tag takes 2 arguments");
      Push(a[0]);
      return absl::OkStatus();
    case Callable::kRebuildTensorV2: {
      RT_ASSIGN_OR_RETURN(ValuePtr tensor, RebuildTensor(a));
      Push(std::move(tensor));
      return absl::OkStatus();
    }
    case Callable::kRebuildParameter:
      // (data, requires_grad, backward_hooks): the Parameter's data is all a state dict keeps.
      if (a.size() != 3 || a[0]->kind != Kind::kTensor) {
        return Corrupt("_rebuild_parameter takes (tensor, requires_grad, backward_hooks)");
      }
      Push(a[0]);
      return absl::OkStatus();
    case Callable::kStorageType:
      break;
  }
  return Unsupported(absl::StrCat("calling ", callable->text,
                                  " (storages are accepted only as persistent ids)"));
}

absl::Status Unpickler::PersistentLoad() {
  RT_ASSIGN_OR_RETURN(ValuePtr pid, Pop());
  const std::vector<ValuePtr>& f = pid->items;
  if (pid->kind != Kind::kTuple || f.size() != 5 || f[0]->kind != Kind::kString ||
      f[0]->text != "storage") {
    return Unsupported(absl::StrCat("persistent id is a ", Describe(*pid),
                                    ", expected ('storage', type, key, location, numel)"));
  }
  if (f[1]->kind != Kind::kGlobal || f[1]->callable != Callable::kStorageType) {
    return Unsupported(absl::StrCat("storage type is a ", Describe(*f[1])));
  }
  if (f[2]->kind != Kind::kString || f[3]->kind != Kind::kString || f[4]->kind != Kind::kInt ||
      f[4]->number < 0) {
    return Corrupt("storage persistent id needs a str key, a str location and an int numel >= 0");
  }
  const std::string& key = f[2]->text;
  const at::ScalarType dtype = f[1]->dtype;
  const int64_t numel = f[4]->number;
  if (auto it = storages_.find(key); it != storages_.end()) {
    const Value& seen = *it->second;
    if (seen.dtype != dtype || seen.number != numel) {
      return Unsupported(absl::StrCat("storage '", key, "' is referenced as ", numel, " x ",
                                      c10::toString(dtype), " and as ", seen.number, " x ",
                                      c10::toString(seen.dtype)));
    }
    Push(it->second);
    return absl::OkStatus();
  }
  ValuePtr storage = Make(Kind::kStorage);
  storage->text = key;  // replaced by the record's path once read
  storage->dtype = dtype;
  storage->number = numel;
  const auto options = at::TensorOptions().dtype(dtype);
  const int64_t item_size = static_cast<int64_t>(c10::elementSize(dtype));
  if (numel > INT64_MAX / item_size) return Corrupt(absl::StrCat("storage '", key, "' too large"));
  const int64_t needed = numel * item_size;
  if (needed == 0) {
    // Nothing to read; an empty record is not worth a round trip to the archive.
    storage->tensor = at::empty({0}, options);
  } else {
    RT_ASSIGN_OR_RETURN(StorageRecord record, load_(key));
    storage->text = record.path;
    if (record.bytes.nbytes() < static_cast<size_t>(needed)) {
      return absl::DataLossError(absl::StrCat(
          "record '", record.path, "' holds ", record.bytes.nbytes(), " bytes, but storage '", key,
          "' needs ", needed, " (", numel, " x ", c10::toString(dtype), ")"));
    }
    storage->tensor = at::empty({0}, options).set_(record.bytes, 0, {numel}, {1});
  }
  storages_.emplace(key, storage);
  Push(std::move(storage));
  return absl::OkStatus();
}

bool ToInts(const Value& tuple, std::vector<int64_t>* out) {
  if (tuple.kind != Kind::kTuple || tuple.items.size() > kMaxDims) return false;
  for (const ValuePtr& item : tuple.items) {
    if (item->kind != Kind::kInt || item->number < 0) return false;
    out->push_back(item->number);
  }
  return true;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
// [, metadata]). Geometry is checked against the storage before any view is made: a view must
// never reach past the bytes that were read.
absl::StatusOr<ValuePtr> Unpickler::RebuildTensor(const std::vector<ValuePtr>& a) {
  if (a.size() != 6 && a.size() != 7) {
    return Unsupported(absl::StrCat("_rebuild_tensor_v2 with ", a.size(), " arguments"));
  }
  std::vector<int64_t> sizes, strides;
  if (a[0]->kind != Kind::kStorage || a[1]->kind != Kind::kInt || a[1]->number < 0 ||
      !ToInts(*a[2], &sizes) || !ToInts(*a[3], &strides) || sizes.size() != strides.size() ||
      a[4]->kind != Kind::kBool || a[5]->kind != Kind::kDict ||
      (a.size() == 7 && a[6]->kind != Kind::kDict && a[6]->kind != Kind::kNone)) {
    return Corrupt("_rebuild_tensor_v2 needs (storage, offset >= 0, size, stride, bool, dict)");
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
      return Corrupt("tensor size or stride overflows");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(span, storage.tensor.element_size(), &bytes)) {
    return Corrupt("tensor size overflows");
  }
  ValuePtr tensor = Make(Kind::kTensor);
  if (empty) {
    tensor->tensor = at::empty(sizes, storage.tensor.options());
  } else if (last >= storage.number) {
    return absl::DataLossError(absl::StrCat("a tensor reaches element ", last, " of storage '",
                                            storage.text, "', which holds only ", storage.number));
  } else {
    tensor->tensor = storage.tensor.as_strided(sizes, strides, offset);
  }
  return tensor;
}

absl::Status Unpickler::Step(uint8_t op) {
  switch (op) {
    case kProto: {
      RT_ASSIGN_OR_RETURN(uint64_t version, ReadUint(1));
      if (version > 5) return Unsupported(absl::StrCat("pickle protocol ", version));
      return absl::OkStatus();
    }
    case kFrame:  // a buffering hint; the data is already in memory
      return ReadUint(8).status();
    case kGlobal: {
      std::string module, name;
      RT_RETURN_IF_ERROR(ReadLine(&module));
      RT_RETURN_IF_ERROR(ReadLine(&name));
      return PushGlobal(module, name);
    }
    case kStackGlobal: {
      RT_ASSIGN_OR_RETURN(ValuePtr name, Pop());
      RT_ASSIGN_OR_RETURN(ValuePtr module, Pop());
      if (module->kind != Kind::kString || name->kind != Kind::kString) {
        return Corrupt("STACK_GLOBAL needs two strings");
      }
      return PushGlobal(module->text, name->text);
    }
    case kBinPut: case kLongBinPut: case kMemoize: {
      uint64_t index = memo_.size();
      if (op != kMemoize) {
        RT_ASSIGN_OR_RETURN(index, ReadUint(op == kBinPut ? 1 : 4));
      }
      RT_ASSIGN_OR_RETURN(memo_[index], Top());
      return absl::OkStatus();
    }
    case kBinGet: case kLongBinGet: {
      RT_ASSIGN_OR_RETURN(uint64_t index, ReadUint(op == kBinGet ? 1 : 4));
      auto it = memo_.find(index);
      if (it == memo_.end()) return Corrupt(absl::StrCat("memo index ", index, " was never set"));
      Push(it->second);
      return absl::OkStatus();
    }
    case kMark: marks_.push_back(stack_.size()); return absl::OkStatus();
    case kEmptyDict: Push(Make(Kind::kDict)); return absl::OkStatus();
    case kEmptyList: Push(Make(Kind::kList)); return absl::OkStatus();
    case kEmptyTuple: Push(Make(Kind::kTuple)); return absl::OkStatus();
    case kNone: Push(Make(Kind::kNone)); return absl::OkStatus();
    case kTuple: {
      ValuePtr tuple = Make(Kind::kTuple);
      RT_ASSIGN_OR_RETURN(tuple->items, PopToMark());
      Push(std::move(tuple));
      return absl::OkStatus();
    }
    case kTuple1: return PushTuple(1);
    case kTuple2: return PushTuple(2);
    case kTuple3: return PushTuple(3);
    case kShortBinUnicode: case kBinUnicode: case kBinUnicode8: {
      RT_ASSIGN_OR_RETURN(uint64_t length,
                          ReadUint(op == kShortBinUnicode ? 1 : op == kBinUnicode ? 4 : 8));
      return PushString(length);
    }
    case kBinInt: case kBinInt1: case kBinInt2: case kLong1: {
      ValuePtr v = Make(Kind::kInt);
      // LONG1 is n-byte little-endian two's complement; BININT is signed 32-bit; BININT1/2
      // are unsigned.
      uint64_t width = op == kBinInt ? 4 : op == kBinInt1 ? 1 : 2;
      if (op == kLong1) {
        RT_ASSIGN_OR_RETURN(width, ReadUint(1));
        if (width > 8) return Unsupported(absl::StrCat("a ", width, "-byte integer"));
      }
      RT_ASSIGN_OR_RETURN(uint64_t u, ReadUint(width));
      const bool is_signed = op == kBinInt || op == kLong1;
      if (is_signed && width > 0 && width < 8 && (u >> (8 * width - 1)) & 1) {
        u |= ~uint64_t{0} << (8 * width);
      }
      v->number = static_cast<int64_t>(u);
      Push(std::move(v));
      return absl::OkStatus();
    }
    case kNewTrue: case kNewFalse: {
      ValuePtr v = Make(Kind::kBool);
      v->number = op == kNewTrue;
      Push(std::move(v));
      return absl::OkStatus();
    }
    case kBinFloat: {  // big-endian IEEE double
      absl::string_view bytes;
      RT_RETURN_IF_ERROR(ReadBytes(8, &bytes));
      uint64_t u = 0;
      for (char c : bytes) u = (u << 8) | static_cast<uint8_t>(c);
      ValuePtr v = Make(Kind::kFloat);
      std::memcpy(&v->real, &u, sizeof(u));
      Push(std::move(v));
      return absl::OkStatus();
    }
    case kReduce: return Reduce();
    case kBinPersId: return PersistentLoad();
    case kSetItem: {
      RT_ASSIGN_OR_RETURN(ValuePtr value, Pop());
      RT_ASSIGN_OR_RETURN(ValuePtr key, Pop());
      RT_ASSIGN_OR_RETURN(ValuePtr dict, Top());
      return SetItems(*dict, {key, value});
    }
    case kSetItems: {
      RT_ASSIGN_OR_RETURN(std::vector<ValuePtr> key_values, PopToMark());
      RT_ASSIGN_OR_RETURN(ValuePtr dict, Top());
      return SetItems(*dict, key_values);
    }
    case kAppend: case kAppends: {
      std::vector<ValuePtr> values;
      if (op == kAppend) {
        RT_ASSIGN_OR_RETURN(ValuePtr value, Pop());
        values.push_back(std::move(value));
      } else {
        RT_ASSIGN_OR_RETURN(values, PopToMark());
      }
      RT_ASSIGN_OR_RETURN(ValuePtr list, Top());
      if (list->kind != Kind::kList) return Corrupt(absl::StrCat("APPEND to a ", Describe(*list)));
      for (ValuePtr& v : values) list->items.push_back(std::move(v));
      return absl::OkStatus();
    }
    case kBuild: {
      // model.state_dict() is an OrderedDict carrying a `_metadata` attribute (module versions);
      // BUILD sets it. The names and tensors are all a reader needs, so the state is dropped.
      RT_ASSIGN_OR_RETURN(ValuePtr state, Pop());
      RT_ASSIGN_OR_RETURN(ValuePtr target, Top());
      if (target->kind != Kind::kDict) {
        return Unsupported(absl::StrCat("BUILD (setting object state) on a ", Describe(*target)));
      }
      return absl::OkStatus();
    }
    case kStop: {
      RT_ASSIGN_OR_RETURN(result_, Pop());
      return absl::OkStatus();
    }
  }
  std::string shown = std::isprint(op) ? absl::StrCat(" ('", std::string(1, op), "')") : "";
  return Unsupported(absl::StrCat("opcode 0x", absl::Hex(op, absl::kZeroPad2), shown));
}

absl::StatusOr<StateDict> Unpickler::Run() {
  while (result_ == nullptr) {
    op_offset_ = pos_;
    if (pos_ >= data_.size()) return Corrupt("the pickle ends without STOP");
    RT_RETURN_IF_ERROR(Step(static_cast<uint8_t>(data_[pos_++])));
  }
  return ToStateDict(*result_);
}

absl::StatusOr<StateDict> Unpickler::ToStateDict(const Value& top) const {
  if (top.kind != Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat("the file holds a ", Describe(top), ", not a dict of name -> tensor"));
  }
  StateDict out;
  std::unordered_map<const c10::StorageImpl*, int> uses;
  for (size_t i = 0; i < top.items.size(); i += 2) {
    const Value& key = *top.items[i];
    const Value& value = *top.items[i + 1];
    if (key.kind != Kind::kString) {
      return absl::InvalidArgumentError(absl::StrCat("dict key #", i / 2, " is a ",
                                                     Describe(key), ", not a str"));
    }
    if (value.kind != Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry '", absl::CHexEscape(key.text), "' is a ", Describe(value), ", not a tensor"));
    }
    out.emplace_back(key.text, value.tensor);
    ++uses[value.tensor.storage().unsafeGetStorageImpl()];
  }
  // A tensor may keep its record's memory only when it is the sole, exact, dense user of it;
  // otherwise in-place updates to one entry would show through another.
  uint64_t growth = 0;
  for (auto& [name, tensor] : out) {
    const bool owns = uses[tensor.storage().unsafeGetStorageImpl()] == 1 &&
                      tensor.is_contiguous() && tensor.storage_offset() == 0 &&
                      tensor.storage().nbytes() ==
                          static_cast<size_t>(tensor.numel()) * tensor.element_size();
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
      return absl::ResourceExhaustedError(absl::StrCat("cannot materialize '",
                                                       absl::CHexEscape(name), "' (",
                                                       tensor.numel(), " elements): ",
                                                       e.what_without_backtrace()));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<StateDict> UnpickleStateDict(absl::string_view pickle,
                                            const StorageLoader& load_storage) {
  Unpickler unpickler(pickle, load_storage);
  try {
    return unpickler.Run();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while unpickling");
  } catch (const c10::Error& e) {
    // Not expected: inputs are checked before LibTorch sees them. But a throw must not escape.
    return absl::InternalError(
        absl::StrCat("unexpected error while unpickling: ", e.what_without_backtrace()));
  }
}

}  // namespace serialize_internal
}  // namespace ringtrain
