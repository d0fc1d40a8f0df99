import Foundation

/// The suite's executables as `swift build` left them (beside the test bundle, or in `IAP_BIN_DIR`), run the way
/// the tests that spawn them want: with this process's environment minus every `IAP_*` variable (so nothing a
/// developer exported leaks in), plus what the test gives.
public enum BuiltExecutables {
    public static var directory: URL {
        ProcessInfo.processInfo.environment["IAP_BIN_DIR"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    }

    public static func url(_ name: String) -> URL { directory.appendingPathComponent(name) }

    /// This process's environment without `IAP_*` (but `IAP_BIN_DIR`), merged with `extra`.
    public static func environment(_ extra: [String: String] = [:]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for key in environment.keys where key.hasPrefix("IAP_") && key != "IAP_BIN_DIR" { environment[key] = nil }
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// Runs `name` to its end with `arguments` and `environment(env)`.
    public static func run(_ name: String, _ arguments: [String], env: [String: String] = [:]) async throws -> Subprocess.Output {
        try await Subprocess.run(url(name).path, arguments, environment: environment(env))
    }
}
