#include "server/text/jinja/interpreter.h"

#include "absl/strings/match.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom::text::jinja {
namespace {

// A macro defined by `{% macro %}`, or the `caller` of a call block.
class MacroCallable : public Callable {
 public:
  MacroCallable(const Stmt* def, std::shared_ptr<Frame> closure, Value caller)
      : def_(def), closure_(std::move(closure)), caller_(std::move(caller)) {}
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs& args) const override {
    return interp.CallMacro(*def_, closure_, args, caller_);
  }
  std::string Name() const override { return def_->name.empty() ? "caller" : def_->name; }

 private:
  const Stmt* def_;
  std::shared_ptr<Frame> closure_;
  Value caller_;
};

// loop.cycle(a, b, ...): the argument at loop.index0 modulo their count.
class CycleCallable : public Callable {
 public:
  explicit CycleCallable(int64_t index0) : index0_(index0) {}
  absl::StatusOr<Value> Call(Interpreter&, CallArgs& args) const override {
    if (args.args.empty()) return absl::InvalidArgumentError("no items for cycling given");
    return args.args[index0_ % static_cast<int64_t>(args.args.size())];
  }
  std::string Name() const override { return "cycle"; }

 private:
  int64_t index0_;
};

Value MakeLoop(const ValueList& items, size_t i, int depth) {
  auto loop = std::make_shared<Dict>();
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t index0 = static_cast<int64_t>(i);
  loop->Set(Value::String("index0"), Value::Int(index0));
  loop->Set(Value::String("index"), Value::Int(index0 + 1));
  loop->Set(Value::String("revindex0"), Value::Int(n - index0 - 1));
  loop->Set(Value::String("revindex"), Value::Int(n - index0));
  loop->Set(Value::String("first"), Value::Bool(index0 == 0));
  loop->Set(Value::String("last"), Value::Bool(index0 == n - 1));
  loop->Set(Value::String("length"), Value::Int(n));
  loop->Set(Value::String("depth"), Value::Int(depth));
  loop->Set(Value::String("depth0"), Value::Int(depth - 1));
  loop->Set(Value::String("previtem"),
            i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
  loop->Set(Value::String("nextitem"),
            i + 1 < items.size() ? items[i + 1] : Value::Undefined("there is no next item"));
  loop->Set(Value::String("cycle"), Value::Function(std::make_shared<CycleCallable>(index0)));
  return Value::FromDict(std::move(loop));
}

// Binds `value` to the names of an assignment target (unpacking for several names).
absl::Status Assign(Frame& frame, const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    frame.vars[targets[0]] = value;
    return absl::OkStatus();
  }
  ValueList parts;
  if (value.IsSequence()) {
    parts = value.AsList();
  } else if (value.IsString()) {
    for (std::string& cp : CodePoints(value.AsString())) parts.push_back(Value::String(std::move(cp)));
  } else {
    return absl::InvalidArgumentError(StrCat("cannot unpack non-iterable ", value.TypeName(), " object"));
  }
  if (parts.size() != targets.size()) {
    return absl::InvalidArgumentError(
        parts.size() > targets.size()
            ? StrCat("too many values to unpack (expected ", targets.size(), ")")
            : StrCat("not enough values to unpack (expected ", targets.size(), ", got ", parts.size(), ")"));
  }
  for (size_t i = 0; i < parts.size(); ++i) frame.vars[targets[i]] = parts[i];
  return absl::OkStatus();
}

std::shared_ptr<Frame> ChildFrame(const std::shared_ptr<Frame>& parent) {
  auto frame = std::make_shared<Frame>();
  frame->parent = parent;
  return frame;
}

}  // namespace

const Value* Frame::Lookup(std::string_view name) const {
  const std::string key(name);
  for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
    auto it = f->vars.find(key);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::~Interpreter() {
  // Macros hold their defining frame and namespaces may hold themselves; cut those cycles.
  for (const auto& ns : namespaces_) {
    ns->items.clear();
    ns->index.clear();
  }
  for (const auto& frame : frames_) frame->vars.clear();
}

absl::StatusOr<std::string> Interpreter::Run(const Body& body, const Value& context) {
  auto globals = std::make_shared<Frame>();
  AddGlobals(*globals);
  auto vars = ChildFrame(globals);
  if (context.IsDict()) {
    for (const auto& [key, value] : context.AsDict().items) vars->vars[key.Str()] = value;
  }
  auto root = ChildFrame(vars);
  frames_.push_back(root);
  std::string out;
  out_ = &out;
  LOOM_RETURN_IF_ERROR(ExecBody(body, root));
  return out;
}

absl::Status Interpreter::CheckSize(size_t bytes) const {
  if (static_cast<int64_t>(bytes) > options_.max_output_bytes) {
    return absl::InvalidArgumentError(
        StrCat("template output exceeds the limit of ", options_.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Step() {
  if (++steps_ > options_.max_steps) {
    return absl::InvalidArgumentError(
        StrCat("template exceeds the limit of ", options_.max_steps, " evaluation steps"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Write(std::string_view text) {
  LOOM_RETURN_IF_ERROR(CheckSize(out_->size() + text.size()));
  out_->append(text);
  return absl::OkStatus();
}

absl::Status Interpreter::AtPosition(int line, int column, const absl::Status& status) const {
  if (absl::StartsWith(status.message(), "template ")) return status;
  return absl::Status(status.code(), StrCat("template error at line ", line, ", column ", column,
                                            ": ", status.message()));
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body, const std::shared_ptr<Frame>& frame) {
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  absl::Status status = ExecBody(body, frame);
  out_ = saved;
  if (!status.ok()) return status;
  return captured;
}

absl::Status Interpreter::ExecBody(const Body& body, const std::shared_ptr<Frame>& frame) {
  if (++depth_ > options_.max_depth) {
    --depth_;
    return absl::InvalidArgumentError("template error: nesting too deep (recursion limit)");
  }
  absl::Status status;
  for (const StmtPtr& stmt : body) {
    status = ExecStmt(*stmt, frame);
    if (!status.ok()) {
      status = AtPosition(stmt->line, stmt->column, status);
      break;
    }
    if (flow_ != Flow::kNormal) break;
  }
  --depth_;
  return status;
}

absl::Status Interpreter::ExecStmt(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  LOOM_RETURN_IF_ERROR(Step());
  switch (stmt.kind) {
    case StmtKind::kText:
      return Write(stmt.text);
    case StmtKind::kOutput: {
      LOOM_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, frame));
      if (v.IsString()) return Write(v.AsString());
      return Write(v.Str());
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : stmt.branches) {
        LOOM_ASSIGN_OR_RETURN(Value v, Eval(*cond, frame));
        if (v.Truthy()) return ExecBody(body, frame);
      }
      return ExecBody(stmt.else_body, frame);
    case StmtKind::kFor:
      return ExecFor(stmt, frame);
    case StmtKind::kSet:
    case StmtKind::kSetBlock:
      return ExecSet(stmt, frame);
    case StmtKind::kMacro:
      frame->vars[stmt.name] = Value::Function(std::make_shared<MacroCallable>(&stmt, frame, Value()));
      frames_.push_back(frame);
      return absl::OkStatus();
    case StmtKind::kCallBlock:
      return ExecCallBlock(stmt, frame);
    case StmtKind::kFilterBlock:
      return ExecFilterBlock(stmt, frame);
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (loop_depth_ == 0) return absl::InvalidArgumentError("break or continue outside a loop");
      flow_ = stmt.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
      return absl::OkStatus();
    case StmtKind::kScope: {
      auto inner = ChildFrame(frame);
      for (size_t i = 0; i < stmt.targets.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(inner->vars[stmt.targets[i]], Eval(*stmt.values[i], frame));
      }
      return ExecBody(stmt.body, inner);
    }
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  if (stmt.recursive) return absl::InvalidArgumentError("recursive for loops are not supported");
  LOOM_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr, frame));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(iterable));
  if (stmt.filter) {
    ValueList kept;
    for (Value& item : items) {
      auto scratch = ChildFrame(frame);
      LOOM_RETURN_IF_ERROR(Assign(*scratch, stmt.targets, item));
      LOOM_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.filter, scratch));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  ++loop_depth_;
  absl::Status status;
  // As in jinja2, the else block runs unless some iteration reached the end of the body (one
  // that ends in break or continue does not count).
  bool completed_iteration = false;
  for (size_t i = 0; i < items.size(); ++i) {
    status = Step();  // an iteration counts even when its body is empty
    if (!status.ok()) break;
    auto iteration = ChildFrame(frame);
    status = Assign(*iteration, stmt.targets, items[i]);
    if (!status.ok()) break;
    iteration->vars["loop"] = MakeLoop(items, i, 1);
    status = ExecBody(stmt.body, iteration);
    if (!status.ok()) break;
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kNormal) completed_iteration = true;
    if (flow == Flow::kBreak) break;
  }
  --loop_depth_;
  if (!status.ok() || completed_iteration || stmt.else_body.empty()) return status;
  return ExecBody(stmt.else_body, frame);
}

absl::Status Interpreter::ExecSet(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  Value value;
  if (stmt.kind == StmtKind::kSetBlock) {
    LOOM_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, frame));
    value = Value::String(std::move(text));
    if (stmt.filter) {
      LOOM_ASSIGN_OR_RETURN(value, EvalFilterChain(*stmt.filter, value, frame));
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(value, Eval(*stmt.expr, frame));
  }
  if (stmt.attr.empty()) return Assign(*frame, stmt.targets, value);
  const Value* ns = frame->Lookup(stmt.targets[0]);
  if (ns == nullptr || !ns->IsNamespace()) {
    return absl::InvalidArgumentError("can not assign attribute on non-namespace object");
  }
  ns->MutableDict().Set(Value::String(stmt.attr), std::move(value));
  return absl::OkStatus();
}

absl::Status Interpreter::ExecCallBlock(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  const Expr& call = *stmt.expr;
  LOOM_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], frame));
  if (!callee.IsCallable()) return absl::InvalidArgumentError("call block needs a macro to call");
  CallArgs args;
  LOOM_RETURN_IF_ERROR(EvalArgs(call, 1, frame, &args));
  args.kwargs.emplace_back(
      "caller", Value::Function(std::make_shared<MacroCallable>(&stmt, frame, Value())));
  LOOM_ASSIGN_OR_RETURN(Value result, callee.AsCallable().Call(*this, args));
  return Write(result.Str());
}

absl::Status Interpreter::ExecFilterBlock(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, frame));
  LOOM_ASSIGN_OR_RETURN(Value value,
                        EvalFilterChain(*stmt.filter, Value::String(std::move(text)), frame));
  return Write(value.Str());
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& def, const std::shared_ptr<Frame>& closure,
                                             CallArgs& args, const Value& caller) {
  auto frame = ChildFrame(closure);
  const std::string name = def.name.empty() ? "caller" : def.name;
  if (args.args.size() > def.params.size()) {
    return absl::InvalidArgumentError(
        StrCat("macro '", name, "' takes not more than ", def.params.size(), " argument(s)"));
  }
  for (size_t i = 0; i < args.args.size(); ++i) frame->vars[def.params[i]] = args.args[i];
  Value caller_value = caller;
  for (auto& [key, value] : args.kwargs) {
    if (key == "caller") {
      caller_value = value;
      continue;
    }
    size_t index = 0;
    while (index < def.params.size() && def.params[index] != key) ++index;
    if (index == def.params.size()) {
      return absl::InvalidArgumentError(StrCat("macro '", name, "' takes no keyword argument '", key, "'"));
    }
    if (index < args.args.size()) {
      return absl::InvalidArgumentError(StrCat("macro '", name, "' got multiple values for argument '", key, "'"));
    }
    frame->vars[key] = value;
  }
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (frame->vars.contains(def.params[i])) continue;
    if (def.defaults[i]) {
      LOOM_ASSIGN_OR_RETURN(frame->vars[def.params[i]], Eval(*def.defaults[i], frame));
    } else {
      frame->vars[def.params[i]] =
          Value::Undefined(StrCat("parameter '", def.params[i], "' was not provided"));
    }
  }
  if (!caller_value.IsUndefined()) frame->vars["caller"] = caller_value;
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  absl::StatusOr<std::string> text = Capture(def.body, frame);
  loop_depth_ = saved_loop_depth;
  flow_ = Flow::kNormal;
  if (!text.ok()) return text.status();
  return Value::String(std::move(*text));
}

}  // namespace loom::text::jinja
