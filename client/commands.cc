// The command table: one row per subcommand. A new subcommand is its file (XFlags, deriving from
// CommonFlags to read the common flags; AddXCommand; RunX) and its row here.
#include "client/checkpoints_command.h"
#include "client/cluster_up.h"
#include "client/command.h"
#include "client/compare_command.h"
#include "client/export_command.h"
#include "client/logs_command.h"
#include "client/loss_compare_command.h"
#include "client/plan_command.h"
#include "client/plot.h"
#include "client/service_commands.h"
#include "client/tensorboard_command.h"
#include "client/top_command.h"

namespace ringtrain {

std::vector<Command> Commands() {
  constexpr unsigned kService = kCallsCoordinator | kCredentials | kOutputFormat;
  return {
      MakeCommand("loss-compare", kCoordinatorOptIn | kCredentials, AddLossCompareCommand,
                  RunLossCompare),
      MakeCommand("compare", kService, AddCompareCommand, RunCompare),
      MakeCommand("export", kCallsCoordinator | kCredentials, AddExportCommand, RunExport),
      MakeCommand("tensorboard", kCallsCoordinator | kCredentials, AddTensorboardCommand,
                  RunTensorboard),
      MakeCommand("submit", kService, AddSubmitCommand, RunSubmit),
      MakeCommand("watch", kService, AddWatchCommand, RunWatchCommand),
      MakeCommand("get", kService, AddGetCommand, RunGet),
      MakeCommand("checkpoints", kService, AddCheckpointsCommand, RunCheckpoints),
      MakeCommand("list", kService, AddListCommand, RunList),
      MakeCommand("cancel", kService, AddCancelCommand, RunCancel),
      MakeCommand("workers", kService, AddWorkersCommand, RunWorkers),
      // `up` listens on its --listen (alias --coordinator) and calls only the coordinator it
      // starts, in plaintext; the credential flags are still read (and checked) as everywhere.
      MakeCommand("up", kCredentials, AddUpCommand, RunUp),
      MakeCommand("plot", kCallsCoordinator | kCredentials, AddPlotCommand, RunPlot),
      MakeCommand("logs", kService, AddLogsCommand, RunLogs),
      MakeCommand("top", kService, AddTopCommand, RunTop),
      MakeCommand("plan", kOutputFormat, AddPlanCommand, RunPlan),  // contacts nothing
  };
}

}  // namespace ringtrain
