// `ringctl export JOB [--out FILE] [--from-step N]`: a job's step records from the coordinator's
// store as JSONL — one line per step, the trainer's own record verbatim (the object `ringtrain-run
// --metrics.jsonl=FILE` writes: step, loss, grad_norm, lr, ..., ranks), in step order. This is
// where a submitted job's `metrics.jsonl` goes: the service keeps the records and ignores that key.
#ifndef RINGTRAIN_CLIENT_EXPORT_COMMAND_H_
#define RINGTRAIN_CLIENT_EXPORT_COMMAND_H_

#include <cstdint>
#include <string>

#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct ExportFlags : CommonFlags {
  std::string job_id;
  std::string out;  // empty or "-": stdout
  int64_t from_step = 0;
  // --output, which export does not take: it always writes JSONL. "json"/"jsonl" go on with a
  // note, anything else is refused; both say why.
  std::string output_asked;
};

// Adds the `export` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddExportCommand(CLI::App& app, ExportFlags* flags);

// Fetches the steps (all of a finished job, those so far of a running one) and writes them; to a
// file through FILE.tmp renamed into place, then "wrote FILE (N steps of JOB, STATE)" on stderr.
// Exit statuses (client/exit_codes.h): 0; 1 for an unknown job; 2 when --out cannot be written; 3
// when the coordinator cannot be reached.
int RunExport(const ExportFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_EXPORT_COMMAND_H_
