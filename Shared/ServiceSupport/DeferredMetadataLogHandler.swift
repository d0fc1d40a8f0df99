import Logging

/// swift-log's stream handler, with metadata kept as set and rendered only when a line is written.
/// The stream handler re-renders its whole metadata string on every set, and servers set per-request
/// metadata (`rpc.request_id`, Hummingbird's `hb.request.id`) on every request whether or not anything is
/// logged: that rendering cost the edge ~3% of its CPU under load.
public struct DeferredMetadataLogHandler: LogHandler {
    private var base: StreamLogHandler
    public var metadata: Logger.Metadata = [:]

    public init(base: StreamLogHandler) {
        self.base = base
    }

    /// Standard error, as `Logger(label:)` writes by default.
    public static func standardError(label: String) -> DeferredMetadataLogHandler {
        DeferredMetadataLogHandler(base: StreamLogHandler.standardError(label: label))
    }

    public var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { base.metadataProvider }
        set { base.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(
        level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String, file: String,
        function: String, line: UInt
    ) {
        let merged = explicit.map { metadata.merging($0) { _, new in new } } ?? metadata
        base.log(level: level, message: message, metadata: merged, source: source, file: file, function: function, line: line)
    }
}
