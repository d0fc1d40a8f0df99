import Foundation

/// The test suite's Python judges (Apple's App Store Server Library, the JSON Schema reference validator, PyYAML,
/// Python's `cryptography`) live in one virtual environment that `scripts/test` makes, pinned by
/// `Tests/Judges/requirements.txt`: `.venv-judges` at the repository root, or `IAP_JUDGES_PYTHON`.
///
/// Without it, a plain `swift test` skips the tests that need a judge and says so; with `IAP_REQUIRE_JUDGES=1`
/// (`scripts/test`, CI) those tests run and fail when the judge is missing.
public enum Judges {
    /// The repository's root (this file is Tests/Support/Judges.swift).
    public static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The virtual environment's interpreter, when there is one.
    public static var python: String? {
        if let given = ProcessInfo.processInfo.environment["IAP_JUDGES_PYTHON"], !given.isEmpty { return given }
        let venv = repository.appendingPathComponent(".venv-judges/bin/python").path
        return FileManager.default.isExecutableFile(atPath: venv) ? venv : nil
    }

    public static var required: Bool { ProcessInfo.processInfo.environment["IAP_REQUIRE_JUDGES"] == "1" }

    /// True when a judge's test should run: the environment is there, or it is required (and then missing fails).
    public static var available: Bool {
        if python != nil || required { return true }
        print("skipped: no judges' virtual environment (.venv-judges); scripts/test makes it (or set IAP_JUDGES_PYTHON)")
        return false
    }

    /// The interpreter for scripts that only need the system's packages when no environment exists.
    public static var pythonOrSystem: String { python ?? "python3" }

    /// A script in Tests/Judges.
    public static func script(_ name: String) -> String { repository.appendingPathComponent("Tests/Judges/\(name)").path }
}
