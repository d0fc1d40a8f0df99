import Logging
import NIOConcurrencyHelpers

/// Every log line of every service, rendered with all its metadata, kept in memory: tests check what
/// was (and was not) written to the logs.
public final class LogCapture: Sendable {
    private let lines = NIOLockedValueBox<[String]>([])

    public init() {}

    /// A factory for `Logger(label:factory:)`.
    public var factory: @Sendable (String) -> any LogHandler {
        { [self] label in Handler(sink: self, label: label) }
    }

    public var all: [String] { lines.withLockedValue { $0 } }

    struct Handler: LogHandler {
        let sink: LogCapture
        let label: String
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            let merged = metadata.merging(explicit ?? [:]) { $1 }
            let rendered = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            sink.lines.withLockedValue { $0.append("\(level) \(label) [\(source)] \(message) \(rendered)") }
        }
    }
}
