#include "client/interrupt.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/job_format.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

// The write end of the live FollowInterrupt's pipe, for the handler (-1: none).
volatile sig_atomic_t interrupt_fd = -1;

void OnSigint(int) {
  const int saved = errno;
  const char one = 1;
  if (interrupt_fd >= 0) (void)!write(interrupt_fd, &one, 1);
  errno = saved;
}

}  // namespace

std::string LeftRunningNote(const std::string& job_id) {
  return absl::StrCat("ringctl: interrupted; ", job_id,
                      " keeps running on the cluster (stopping ringctl does not stop the job).\n",
                      "  cancel it:        ringctl cancel ", job_id, "\n",
                      "  follow it again:  ringctl watch ", job_id, "\n",
                      "  (--cancel-on-interrupt cancels the job on Ctrl-C instead)");
}

FollowInterrupt::FollowInterrupt(CoordinatorClient* client, std::string job_id, bool cancel)
    : client_(client), job_id_(std::move(job_id)), cancel_(cancel) {
  if (pipe(pipe_) != 0) return;  // no note on Ctrl-C then: the default SIGINT still ends ringctl
  thread_ = std::thread([this] { Wait(); });
  interrupt_fd = pipe_[1];
  struct sigaction action {};
  action.sa_handler = OnSigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_);
}

FollowInterrupt::~FollowInterrupt() {
  if (!thread_.joinable()) return;
  sigaction(SIGINT, &previous_, nullptr);
  interrupt_fd = -1;
  const char stop = 0;
  (void)!write(pipe_[1], &stop, 1);
  thread_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

void FollowInterrupt::Wait() {
  char byte = 0;
  for (;;) {
    const ssize_t n = read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || byte == 0) return;
    Interrupted();
  }
}

void FollowInterrupt::Interrupted() {
  std::cout.flush();  // the step lines printed so far (the follower may be mid-line)
  std::string note;
  if (!cancel_) {
    note = LeftRunningNote(job_id_);
  } else {
    CallOptions options;
    options.timeout = std::chrono::seconds(5);
    const absl::StatusOr<v1::Job> job = client_->CancelJob(job_id_, options);
    note = job.ok() ? absl::StrCat("ringctl: interrupted; cancelled ", job_id_,
                                   " (--cancel-on-interrupt): ", JobStateName(job->state()))
                    : absl::StrCat("ringctl: interrupted; could not cancel ", job_id_, ": ",
                                   EscapeForTerminal(job.status().message()),
                                   " (it may still be running: ringctl "
                                   "cancel ",
                                   job_id_, ")");
  }
  std::cerr << "\n" << note << std::endl;
  std::_Exit(kExitInterrupted);
}

}  // namespace ringtrain
