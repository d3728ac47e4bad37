// The Catch2 entry point for tests run under mpirun: every rank runs the same test cases in the
// same order, with the runtime (and its MPI backend) up.
//
// A failed assertion on one rank would leave the other ranks waiting in its next collective, so
// it ends the whole job at once, naming the assertion and the rank.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <string>

#include "dtensor/runtime.h"
#include "runtime/process.h"

namespace {

class EndJobOnFailure : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const Catch::AssertionResult& result = stats.assertionResult;
    if (result.isOk() || dtensor::this_process().count == 1) return true;
    std::string message = "test assertion failed at " + std::string(result.getSourceInfo().file) +
                          ":" + std::to_string(result.getSourceInfo().line) + ": " +
                          result.getExpressionInMacro();
    if (result.hasExpandedExpression()) message += " with " + result.getExpandedExpression();
    if (result.hasMessage()) message += ": " + result.getMessage();
    for (const Catch::MessageInfo& info : stats.infoMessages) message += "\n  " + info.message;
    dtensor::Runtime::abort_job(message, 1);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(EndJobOnFailure)

int main(int argc, char** argv) {
  return dtensor::run_main(
      argc, argv, [&](dtensor::Runtime&) { return Catch::Session().run(argc, argv) == 0 ? 0 : 1; });
}
