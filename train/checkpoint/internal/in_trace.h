// Why saves and restores refuse to run while a captured step traces (train/capture/function.h):
// a replay runs the recorded calls only, so a save recorded as host work would write nothing on
// replays, and a restore would not load again.
#pragma once

namespace dtensor::checkpoint_internal {

inline constexpr const char* kSaveInTraceReason =
    "it writes files on the host, which a replay would not write again; save between steps, "
    "outside the step";
inline constexpr const char* kRestoreInTraceReason =
    "it reads files on the host into the variables, which a replay would not read again; restore "
    "before calling the step";

}  // namespace dtensor::checkpoint_internal
