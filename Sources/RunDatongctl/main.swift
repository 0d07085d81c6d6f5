import DatongCtl
import Foundation

let result = await Datongctl.run(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
if !result.output.isEmpty {
    if result.exitCode == 0 {
        print(result.output)
    } else {
        FileHandle.standardError.write(Data((result.output + "\n").utf8))
    }
}
exit(result.exitCode)
