import DatongCtl
import Foundation

let result = await Datongctl.run(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
if !result.output.isEmpty {
    // `datongctl status` prints its screen on standard output also when something needs attention.
    if result.exitCode == 0 || result.exitCode == 4 {
        print(result.output)
    } else {
        FileHandle.standardError.write(Data((result.output + "\n").utf8))
    }
}
exit(result.exitCode)
