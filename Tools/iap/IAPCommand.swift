import ArgumentParser

/// `iap`: the suite's command-line client. Exit codes: 0 success; 1 the service (or check) refused
/// (e.g. an invalid receipt); 2 a service could not be reached; 64 usage errors.
@main
struct IAPCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "iap",
        abstract: "Command-line client for the in-app purchase suite.",
        subcommands: [ReceiptCommand.self, SimCommand.self, CallCommand.self])
}

enum ExitCodes {
    static let refused = ExitCode(1)
    static let unreachable = ExitCode(2)
}
