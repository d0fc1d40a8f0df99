import Logging

/// What a method handler knows about the call it is serving.
public struct RequestContext: Sendable {
    /// The method being served.
    public let method: String
    /// The caller's IP address (for rate limits per client address), when known.
    public let remoteAddress: String?
    private let connectionID: Int
    private let sequence: Int
    private let baseLogger: Logger

    public init(method: String, connectionID: Int, sequence: Int, remoteAddress: String?, logger: Logger) {
        self.method = method
        self.connectionID = connectionID
        self.sequence = sequence
        self.remoteAddress = remoteAddress
        self.baseLogger = logger
    }

    /// `<connection>-<sequence>`, unique within this server process; also in every log line.
    /// Built on use: most requests never log.
    public var requestID: String { "\(connectionID)-\(sequence)" }

    /// A logger carrying `rpc.request_id` and `rpc.method` (built on use: most requests never log).
    public var logger: Logger {
        var l = baseLogger
        l[metadataKey: "rpc.request_id"] = "\(requestID)"
        l[metadataKey: "rpc.method"] = "\(method)"
        return l
    }
}
