// Status propagation for every module boundary (config, weights, validation, device, step).
//
//   LOOM_RETURN_IF_ERROR(ReadHeader(file));
//   LOOM_ASSIGN_OR_RETURN(Tensor t, checkpoint.Find("model.norm.weight"));
//
// Both evaluate their argument once and return the failing absl::Status unchanged.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LOOM_STATUS_CONCAT_INNER(a, b) a##b
#define LOOM_STATUS_CONCAT(a, b) LOOM_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define LOOM_RETURN_IF_ERROR(expr)                      \
  do {                                                  \
    ::absl::Status loom_status_ = (expr);               \
    if (!loom_status_.ok()) return loom_status_;        \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the
// value into `lhs`, which may be a declaration (`auto x`) or an existing lvalue.
#define LOOM_ASSIGN_OR_RETURN(lhs, rexpr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_STATUS_CONCAT(loom_statusor_, __LINE__), lhs, rexpr)

#define LOOM_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
