// The tree-walking evaluator behind Template::Render (internal to server/text/jinja).
//
// One Interpreter renders one template once, on one thread. Scoping follows jinja2: a for-loop
// iteration, a macro call and a with block get a fresh frame whose parent is the enclosing one;
// `set` writes to the current frame, so a value set inside a loop does not survive the iteration
// (templates use a namespace for that). Break/continue travel as a pending flag that stops the
// enclosing bodies up to the loop.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/template.h"
#include "server/text/jinja/value.h"

namespace loom::text::jinja {

// A scope: variables and the enclosing scope.
struct Frame {
  absl::flat_hash_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  // The variable `name` here or in an enclosing frame, or nullptr.
  const Value* Lookup(std::string_view name) const;
};

// Renders one template once; see the file comment. Not thread-safe (one per render).
class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}
  ~Interpreter();

  // Renders `body` with `context` as the template's variables.
  absl::StatusOr<std::string> Run(const Body& body, const Value& context);

  // Renders `body` in `frame` and returns what it printed.
  absl::StatusOr<std::string> Capture(const Body& body, const std::shared_ptr<Frame>& frame);
  // Evaluates an expression.
  absl::StatusOr<Value> Eval(const Expr& expr, const std::shared_ptr<Frame>& frame);

  // Calls a macro (or a call block's caller, which has the same shape): binds `args` to the
  // parameters of `def` in a frame under `closure` and renders def.body.
  absl::StatusOr<Value> CallMacro(const Stmt& def, const std::shared_ptr<Frame>& closure,
                                  CallArgs& args, const Value& caller);

  // Checks a string about to be built against max_output_bytes.
  absl::Status CheckSize(size_t bytes) const;
  // Counts one evaluation step against max_steps.
  absl::Status Step();
  // Remembers a namespace made during this render; its links are cut when the render ends (a
  // namespace may refer to itself).
  void TrackNamespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }

  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status ExecBody(const Body& body, const std::shared_ptr<Frame>& frame);
  absl::Status ExecStmt(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  absl::Status ExecFor(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  absl::Status ExecSet(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  absl::Status ExecCallBlock(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  absl::Status ExecFilterBlock(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  absl::Status Write(std::string_view text);

  absl::StatusOr<Value> EvalNode(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalDict(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalSlice(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalUnary(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalCall(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalFilter(const Expr& expr, const Value& operand,
                                   const std::shared_ptr<Frame>& frame);
  // Applies a filter chain whose innermost operand is missing (filter blocks, block set) to
  // `base`.
  absl::StatusOr<Value> EvalFilterChain(const Expr& expr, const Value& base,
                                        const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalTest(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalCompare(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalBinary(const Expr& expr, const std::shared_ptr<Frame>& frame);
  absl::Status EvalArgs(const Expr& expr, size_t first, const std::shared_ptr<Frame>& frame,
                        CallArgs* args);
  // Prefixes a message with the position of `at` unless it already names one.
  absl::Status AtPosition(int line, int column, const absl::Status& status) const;

  const RenderOptions& options_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int depth_ = 0;
  Flow flow_ = Flow::kNormal;
  int loop_depth_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  std::vector<std::shared_ptr<Frame>> frames_;
};

// Python-semantics operations on values (ops.cc). Errors are InvalidArgument without position.
absl::StatusOr<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& a, const Value& b);
absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
// jinja2's environment.getattr / getitem with the sandbox's view of Python attributes.
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits (dict keys, string characters); error when not iterable.
absl::StatusOr<ValueList> Iterate(const Value& v);
// len(); error for values without a length.
absl::StatusOr<int64_t> Length(const Value& v);
// Error unless `v` is defined (jinja2's Undefined fails on most uses).
absl::Status RequireDefined(const Value& v);
// Python's `fmt % args` for %s, %r, %d, %i and %% (the format filter and the % operator).
absl::StatusOr<std::string> PercentFormat(std::string_view fmt, const ValueList& args);
// Python `<` for sort and min/max (numbers, strings, sequences).
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);
// String split into code points (each as a UTF-8 string).
std::vector<std::string> CodePoints(std::string_view s);

// Filters (filters.cc) and tests (tests.cc) by name; unknown names are errors.
absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& operand,
                                  CallArgs& args);
absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& operand,
                               CallArgs& args);

// Whether a filter or test of that name exists (the parser refuses unknown names, as jinja2's
// compiler does).
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// Bound methods of str, dict and list (methods.cc): a callable for `obj.name`, or Undefined
// when the type has no such method.
Value BoundMethod(const Value& obj, std::string_view name);

// Built-in globals (builtins.cc): range, namespace, dict, raise_exception, strftime_now, ...
void AddGlobals(Frame& frame);

}  // namespace loom::text::jinja
