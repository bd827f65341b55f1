// Status propagation helpers. Abseil 20220623 ships no RETURN_IF_ERROR, so it lives here once.
#ifndef RINGTRAIN_COMMON_STATUS_MACROS_H_
#define RINGTRAIN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RT_CONCAT_INNER_(a, b) a##b
#define RT_CONCAT_(a, b) RT_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status rt_status_ = (expr);      \
    if (!rt_status_.ok()) return rt_status_; \
  } while (0)

// `RT_ASSIGN_OR_RETURN(auto x, StatusOrExpr());` — binds the value or returns the error.
#define RT_ASSIGN_OR_RETURN(lhs, expr) \
  RT_ASSIGN_OR_RETURN_IMPL_(RT_CONCAT_(rt_statusor_, __LINE__), lhs, expr)
#define RT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // RINGTRAIN_COMMON_STATUS_MACROS_H_
