// A pickle virtual machine cut down to what a state dict needs. Values live in a small tagged
// struct (pickle_value.h); storages and tensors are built by pickle_tensors.h. GLOBALs resolve at
// once against a fixed table (FindKnownGlobal), so an unknown class is refused before anything
// calls it. Every read is bounds-checked against the pickle, and the stack honours MARK
// the way CPython's metastack does (nothing below the latest mark can be popped).
#include "worker/engine/serialize/pickle_reader.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/serialize/pickle_tensors.h"
#include "worker/engine/serialize/pickle_value.h"

namespace ringtrain {
namespace serialize_internal {
namespace {

// Opcode values from CPython's Lib/pickle.py: protocol 2 (torch.save's default) plus the protocol-4
// framing opcodes, so pickle_protocol=4 files read too.
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kEmptyList = ']',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyTuple = ')',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

class Unpickler {
 public:
  Unpickler(absl::string_view data, const StorageLoader& load) : data_(data), load_(load) {}
  ~Unpickler();
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // The dict's tensors, copied apart (`materialize`) or as the views of the storages they are.
  absl::StatusOr<StateDict> Run(bool materialize);

 private:
  ValuePtr Make(Kind kind) {
    // Not make_shared: a weak_ptr would then pin the whole Value, not just the control block.
    ValuePtr value(new Value(kind));
    created_.push_back(value);
    return value;
  }
  absl::Status Step(uint8_t op);
  OpErrors Errors() const { return OpErrors{op_offset_}; }
  absl::Status Corrupt(absl::string_view what) const { return Errors().Corrupt(what); }
  absl::Status Unsupported(absl::string_view what) const { return Errors().Unsupported(what); }
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
  if (const KnownGlobal* known = FindKnownGlobal(full); known != nullptr) {
    ValuePtr v = Make(Kind::kGlobal);
    v->text = full;
    v->callable = known->callable;
    v->dtype = known->dtype;
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
      ValuePtr tensor = Make(Kind::kTensor);
      RT_ASSIGN_OR_RETURN(tensor->tensor, RebuildTensorV2(a, Errors()));
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
    case Callable::kStorageType: break;
  }
  return Unsupported(
      absl::StrCat("calling ", callable->text, " (storages are accepted only as persistent ids)"));
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
  storage->dtype = dtype;
  storage->number = numel;
  RT_RETURN_IF_ERROR(LoadStorage(key, load_, Errors(), storage.get()));
  storages_.emplace(key, storage);
  Push(std::move(storage));
  return absl::OkStatus();
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
    case kBinPut:
    case kLongBinPut:
    case kMemoize: {
      uint64_t index = memo_.size();
      if (op != kMemoize) {
        RT_ASSIGN_OR_RETURN(index, ReadUint(op == kBinPut ? 1 : 4));
      }
      RT_ASSIGN_OR_RETURN(memo_[index], Top());
      return absl::OkStatus();
    }
    case kBinGet:
    case kLongBinGet: {
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
    case kShortBinUnicode:
    case kBinUnicode:
    case kBinUnicode8: {
      RT_ASSIGN_OR_RETURN(uint64_t length, ReadUint(op == kShortBinUnicode ? 1
                                                    : op == kBinUnicode    ? 4
                                                                           : 8));
      return PushString(length);
    }
    case kBinInt:
    case kBinInt1:
    case kBinInt2:
    case kLong1: {
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
    case kNewTrue:
    case kNewFalse: {
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
    case kAppend:
    case kAppends: {
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

absl::StatusOr<StateDict> Unpickler::Run(bool materialize) {
  while (result_ == nullptr) {
    op_offset_ = pos_;
    if (pos_ >= data_.size()) return Corrupt("the pickle ends without STOP");
    RT_RETURN_IF_ERROR(Step(static_cast<uint8_t>(data_[pos_++])));
  }
  RT_ASSIGN_OR_RETURN(StateDict entries, DictEntries(*result_));
  if (!materialize) return entries;
  RT_RETURN_IF_ERROR(MaterializeStateDict(entries));
  return entries;
}

}  // namespace

namespace {

absl::StatusOr<StateDict> Unpickle(absl::string_view pickle, const StorageLoader& load_storage,
                                   bool materialize) {
  Unpickler unpickler(pickle, load_storage);
  try {
    return unpickler.Run(materialize);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while unpickling");
  } catch (const c10::Error& e) {
    // Not expected: inputs are checked before LibTorch sees them. But a throw must not escape.
    return absl::InternalError(
        absl::StrCat("unexpected error while unpickling: ", e.what_without_backtrace()));
  }
}

}  // namespace

absl::StatusOr<StateDict> UnpickleStateDict(absl::string_view pickle,
                                            const StorageLoader& load_storage) {
  return Unpickle(pickle, load_storage, /*materialize=*/true);
}

absl::StatusOr<StateDict> UnpickleStateDictViews(absl::string_view pickle,
                                                 const StorageLoader& load_storage) {
  return Unpickle(pickle, load_storage, /*materialize=*/false);
}

}  // namespace serialize_internal
}  // namespace ringtrain
