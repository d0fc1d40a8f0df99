/// A JSON-RPC error object: `{code, message, data}` where `data` always carries a stable
/// machine-readable `reason` and whether the call may be `retryable`, plus optional extras
/// (`retryAfterMs` for rate limits, `status` for receipt failures, `field` for invalid params).
///
/// Every failure a service reports, and every failure a client sees, is one of these.
public struct RPCError: Error, Sendable, Hashable, Codable, CustomStringConvertible {
    public var code: Int
    public var message: String
    public var data: RPCErrorData

    public init(code: Int, message: String, reason: String, retryable: Bool = false, extra: [String: JSONValue] = [:]) {
        self.code = code
        self.message = message
        self.data = RPCErrorData(reason: reason, retryable: retryable, extra: extra)
    }

    public init(code: RPCErrorCode, message: String, reason: String, retryable: Bool = false, extra: [String: JSONValue] = [:]) {
        self.init(code: code.rawValue, message: message, reason: reason, retryable: retryable, extra: extra)
    }

    /// The named code, when this is one of the codes of docs/contract.md, "Errors".
    public var knownCode: RPCErrorCode? { RPCErrorCode(rawValue: code) }
    public var reason: String { data.reason }
    public var retryable: Bool { data.retryable }

    public var description: String { "\(message) (code \(code), reason \(data.reason))" }
}

public struct RPCErrorData: Sendable, Hashable, Codable {
    public var reason: String
    public var retryable: Bool
    /// Further members of `error.data`, flattened next to `reason` and `retryable` on the wire.
    public var extra: [String: JSONValue]

    public init(reason: String, retryable: Bool, extra: [String: JSONValue] = [:]) {
        self.reason = reason
        self.retryable = retryable
        self.extra = extra.filter { $0.key != "reason" && $0.key != "retryable" }
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        reason = try c.decode(String.self, forKey: Key(stringValue: "reason"))
        retryable = try c.decodeIfPresent(Bool.self, forKey: Key(stringValue: "retryable")) ?? false
        var extra: [String: JSONValue] = [:]
        for key in c.allKeys where key.stringValue != "reason" && key.stringValue != "retryable" {
            extra[key.stringValue] = try c.decode(JSONValue.self, forKey: key)
        }
        self.extra = extra
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(reason, forKey: Key(stringValue: "reason"))
        try c.encode(retryable, forKey: Key(stringValue: "retryable"))
        for (k, v) in extra { try c.encode(v, forKey: Key(stringValue: k)) }
    }
}

/// The error codes of the wire contract (JSON-RPC's own, the suite's application codes, and the
/// transport's implementation-defined server errors in -32000...-32099).
public enum RPCErrorCode: Int, Sendable, CaseIterable {
    case parseError = -32700
    case invalidRequest = -32600
    case methodNotFound = -32601
    case invalidParams = -32602
    case internalError = -32603
    /// Server-defined: the server is at its connection limit or shutting down.
    case serverBusy = -32001
    /// Server-defined: the request did not finish within the server's per-request timeout.
    case requestTimeout = -32002

    case unauthenticated = 1001
    case forbidden = 1002
    case notFound = 1003
    case conflict = 1004
    case insufficientFunds = 1005
    case rateLimited = 1006
    case invalidReceipt = 1010
    case unavailable = 1020

    public var name: String {
        switch self {
        case .parseError: return "parseError"
        case .invalidRequest: return "invalidRequest"
        case .methodNotFound: return "methodNotFound"
        case .invalidParams: return "invalidParams"
        case .internalError: return "internalError"
        case .serverBusy: return "serverBusy"
        case .requestTimeout: return "requestTimeout"
        case .unauthenticated: return "unauthenticated"
        case .forbidden: return "forbidden"
        case .notFound: return "notFound"
        case .conflict: return "conflict"
        case .insufficientFunds: return "insufficientFunds"
        case .rateLimited: return "rateLimited"
        case .invalidReceipt: return "invalidReceipt"
        case .unavailable: return "unavailable"
        }
    }
}

extension RPCError {
    public static func parseError(_ detail: String) -> RPCError {
        RPCError(code: .parseError, message: "Parse error: \(detail)", reason: "parseError")
    }
    public static func invalidRequest(_ detail: String, reason: String = "invalidRequest") -> RPCError {
        RPCError(code: .invalidRequest, message: "Invalid Request: \(detail)", reason: reason)
    }
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(
            code: .methodNotFound, message: "Method not found: \(method)", reason: "methodNotFound",
            extra: ["method": .string(method)])
    }
    /// `field` is the dotted path of the offending parameter, when one is to blame.
    public static func invalidParams(_ detail: String, field: String? = nil, reason: String = "invalidParams") -> RPCError {
        RPCError(
            code: .invalidParams, message: "Invalid params: \(detail)", reason: reason,
            extra: field.map { ["field": .string($0)] } ?? [:])
    }
    public static func internalError(_ detail: String = "the server failed to process the request") -> RPCError {
        RPCError(code: .internalError, message: "Internal error: \(detail)", reason: "internal", retryable: true)
    }
    public static func unauthenticated(_ detail: String = "missing, unknown, expired or revoked session") -> RPCError {
        RPCError(code: .unauthenticated, message: detail, reason: "unauthenticated")
    }
    public static func forbidden(_ detail: String, reason: String = "forbidden") -> RPCError {
        RPCError(code: .forbidden, message: detail, reason: reason)
    }
    public static func notFound(_ detail: String, reason: String = "notFound") -> RPCError {
        RPCError(code: .notFound, message: detail, reason: reason)
    }
    public static func conflict(_ detail: String, reason: String) -> RPCError {
        RPCError(code: .conflict, message: detail, reason: reason)
    }
    public static func insufficientFunds(balance: Int64, requested: Int64) -> RPCError {
        RPCError(
            code: .insufficientFunds, message: "spend of \(requested) exceeds the balance of \(balance)",
            reason: "insufficientFunds", extra: ["balance": .int(balance)])
    }
    /// Coins refunded after they were spent are owed; nothing can be spent until later grants repay them.
    public static func debtOutstanding(owed: Int64, balance: Int64) -> RPCError {
        RPCError(
            code: .insufficientFunds,
            message: "\(owed) coins are owed for purchases refunded after they were spent; new grants repay them before anything can be spent",
            reason: "debtOutstanding", extra: ["balance": .int(balance), "owed": .int(owed)])
    }
    public static func rateLimited(retryAfterMs: Int64, detail: String = "too many attempts") -> RPCError {
        RPCError(
            code: .rateLimited, message: "\(detail); retry after \(retryAfterMs) ms", reason: "rateLimited",
            retryable: true, extra: ["retryAfterMs": .int(retryAfterMs)])
    }
    public static func invalidReceipt(status: Int, reason: String, detail: String) -> RPCError {
        RPCError(code: .invalidReceipt, message: detail, reason: reason, extra: ["status": .int(Int64(status))])
    }
    /// A dependency (or the peer, seen from a client) is down or timed out; nothing was changed.
    public static func unavailable(_ detail: String, reason: String = "unavailable") -> RPCError {
        RPCError(code: .unavailable, message: detail, reason: reason, retryable: true)
    }
    public static func unavailable(_ detail: String, reason: RPCErrorReason) -> RPCError {
        unavailable(detail, reason: reason.rawValue)
    }
    public static func forbidden(_ detail: String, reason: RPCErrorReason) -> RPCError {
        forbidden(detail, reason: reason.rawValue)
    }
}
