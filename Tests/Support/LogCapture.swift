import Logging
import NIOConcurrencyHelpers

/// Log records kept in memory, each rendered with all its metadata: tests check what a service
/// warned about, and what was never written (secrets). The one log handler every test uses.
public final class LogCapture: Sendable {
    private let records = NIOLockedValueBox<[(level: Logger.Level, line: String)]>([])

    public init() {}

    /// A factory for `Logger(label:factory:)`.
    public var factory: @Sendable (String) -> any LogHandler {
        { [self] label in Handler(sink: self, label: label) }
    }

    /// A logger at trace level whose records land here.
    public func logger(label: String) -> Logger {
        var logger = Logger(label: label, factory: factory)
        logger.logLevel = .trace
        return logger
    }

    /// Every record as `LEVEL LABEL [SOURCE] MESSAGE key=value ...`.
    public var all: [String] { records.withLockedValue { $0.map(\.line) } }

    /// Whether a record at `level` contains `fragment`.
    public func contains(_ level: Logger.Level, _ fragment: String) -> Bool {
        records.withLockedValue { $0.contains { $0.level == level && $0.line.contains(fragment) } }
    }

    struct Handler: LogHandler {
        let sink: LogCapture
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(
            level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String,
            file: String, function: String, line: UInt
        ) {
            let merged = metadata.merging(explicit ?? [:]) { $1 }
            let rendered = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            sink.records.withLockedValue { $0.append((level, "\(level) \(label) [\(source)] \(message) \(rendered)")) }
        }
    }
}
