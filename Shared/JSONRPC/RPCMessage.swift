import Foundation

/// One request read off the wire. `id == nil` means a notification: it is never answered.
public struct RPCRequest: Sendable {
    public let id: RPCID?
    public let method: String
    /// The raw JSON of `params` (an object or an array), or nil when absent.
    public let params: [UInt8]?

    public init(id: RPCID?, method: String, params: [UInt8]?) {
        self.id = id
        self.method = method
        self.params = params
    }

    public var isNotification: Bool { id == nil }
}

/// A message that could not become a request: answered with `error` under `id` (null when unknown).
public struct RPCRejection: Sendable, Error {
    public let id: RPCID
    public let error: RPCError
}

/// What one line holds.
public enum RPCInbound: Sendable {
    case single(Result<RPCRequest, RPCRejection>)
    /// A non-empty batch within the size limit, one entry per element, in order.
    case batch([Result<RPCRequest, RPCRejection>])
}

public struct RPCMessageLimits: Sendable {
    /// Deepest nesting of arrays/objects accepted in one message.
    public var maxNestingDepth: Int
    /// Most elements accepted in one batch; a larger batch is refused whole with one error.
    public var maxBatchSize: Int

    public init(maxNestingDepth: Int = 64, maxBatchSize: Int = 256) {
        self.maxNestingDepth = maxNestingDepth
        self.maxBatchSize = maxBatchSize
    }
}

public enum RPCMessageParser {
    private static let version = Array(#""2.0""#.utf8)

    /// Parses one line (without its newline) into requests or rejections.
    public static func parse(_ bytes: UnsafeRawBufferPointer, limits: RPCMessageLimits = .init()) -> RPCInbound {
        let scanned: ScannedJSON
        do {
            scanned = try JSONScanner.scan(bytes, maxDepth: limits.maxNestingDepth)
        } catch {
            let reason = error.reason == .tooDeep ? "nestingTooDeep" : (error.reason == .invalidUTF8 ? "invalidUTF8" : "parseError")
            var e = RPCError.parseError(error.description)
            e.data.reason = reason
            return .single(.failure(RPCRejection(id: .null, error: e)))
        }
        switch scanned.root.kind {
        case .object:
            return .single(request(from: scanned.root.members, in: bytes))
        case .array:
            if scanned.elements.isEmpty {
                return .single(.failure(RPCRejection(id: .null, error: .invalidRequest("empty batch", reason: "emptyBatch"))))
            }
            if scanned.elements.count > limits.maxBatchSize {
                return .single(
                    .failure(
                        RPCRejection(
                            id: .null,
                            error: .invalidRequest(
                                "batch of \(scanned.elements.count) exceeds the limit of \(limits.maxBatchSize)",
                                reason: "batchTooLarge"))))
            }
            return .batch(
                scanned.elements.map { element in
                    element.kind == .object
                        ? request(from: element.members, in: bytes)
                        : .failure(RPCRejection(id: .null, error: .invalidRequest("a request must be an object")))
                })
        default:
            return .single(.failure(RPCRejection(id: .null, error: .invalidRequest("expected an object or a batch array"))))
        }
    }

    public static func parse(_ bytes: [UInt8], limits: RPCMessageLimits = .init()) -> RPCInbound {
        bytes.withUnsafeBytes { parse($0, limits: limits) }
    }

    private static func request(from members: [JSONMember], in bytes: UnsafeRawBufferPointer) -> Result<RPCRequest, RPCRejection> {
        var jsonrpc: JSONMember?, idMember: JSONMember?, method: JSONMember?, params: JSONMember?
        var duplicate: String?
        for m in members {
            switch m.key {
            case "jsonrpc": if jsonrpc != nil { duplicate = m.key }; jsonrpc = m
            case "id": if idMember != nil { duplicate = m.key }; idMember = m
            case "method": if method != nil { duplicate = m.key }; method = m
            case "params": if params != nil { duplicate = m.key }; params = m
            default: continue  // unknown members are ignored, as the spec does not forbid them
            }
        }
        // The id is echoed on every error below when it is itself valid.
        var id: RPCID?
        var idProblem = false
        if let m = idMember {
            let raw = Array(bytes[m.value])
            switch m.kind {
            case .string: id = RPCID(kind: .string, rawJSON: raw)
            case .null: id = .null
            case .number where m.isIntegerLiteral: id = RPCID(kind: .integer, rawJSON: raw)
            default: idProblem = true
            }
        }
        // With a duplicated member it is unclear which id the client meant: answer under null.
        let replyID = duplicate == nil ? (id ?? .null) : .null
        func reject(_ detail: String, _ reason: String) -> Result<RPCRequest, RPCRejection> {
            .failure(RPCRejection(id: replyID, error: .invalidRequest(detail, reason: reason)))
        }
        if let duplicate { return reject("member \"\(duplicate)\" appears more than once", "duplicateMember") }
        if idProblem { return reject("id must be a string, an integer or null", "invalidId") }
        guard let jsonrpc, jsonrpc.kind == .string, bytes[jsonrpc.value].elementsEqual(version) else {
            return reject("\"jsonrpc\" must be exactly \"2.0\"", "invalidVersion")
        }
        guard let method, method.kind == .string else { return reject("\"method\" must be a string", "invalidMethod") }
        let methodName = decodeString(bytes[method.value])
        var paramBytes: [UInt8]?
        if let params {
            guard params.kind == .object || params.kind == .array else {
                return reject("\"params\" must be an object or an array", "invalidParams")
            }
            paramBytes = Array(bytes[params.value])
        }
        return .success(RPCRequest(id: id, method: methodName, params: paramBytes))
    }

    /// Decodes a validated JSON string literal (quotes included).
    static func decodeString(_ literal: Slice<UnsafeRawBufferPointer>) -> String {
        let inner = UnsafeRawBufferPointer(rebasing: literal.dropFirst().dropLast())
        let buf = inner.bindMemory(to: UInt8.self)
        if !buf.contains(UInt8(ascii: "\\")) { return String(decoding: buf, as: UTF8.self) }
        return JSONScanner.unescape(buf)
    }
}

/// One reply read off the wire by a client.
public struct RPCResponse: Sendable {
    public let id: RPCID
    public let outcome: Result<[UInt8], RPCError>

    /// Parses a reply line. Returns nil when the line is not a well-formed JSON-RPC response.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> [RPCResponse]? {
        guard let scanned = try? JSONScanner.scan(bytes, maxDepth: JSONScanner.maximumDepthCeiling) else { return nil }
        switch scanned.root.kind {
        case .object:
            return response(scanned.root.members, bytes).map { [$0] }
        case .array:
            var out: [RPCResponse] = []
            for e in scanned.elements {
                guard let r = response(e.members, bytes) else { return nil }
                out.append(r)
            }
            return out
        default:
            return nil
        }
    }

    private static func response(_ members: [JSONMember], _ bytes: UnsafeRawBufferPointer) -> RPCResponse? {
        var id: RPCID?, result: [UInt8]?, error: [UInt8]?
        for m in members {
            switch m.key {
            case "id":
                switch m.kind {
                case .string: id = RPCID(kind: .string, rawJSON: Array(bytes[m.value]))
                case .number: id = RPCID(kind: .integer, rawJSON: Array(bytes[m.value]))
                case .null: id = .null
                default: return nil
                }
            case "result": result = Array(bytes[m.value])
            case "error": error = Array(bytes[m.value])
            default: continue
            }
        }
        guard let id, (result == nil) != (error == nil) else { return nil }
        if let result { return RPCResponse(id: id, outcome: .success(result)) }
        let decoded =
            (try? RPCCodec.decoder.decode(RPCError.self, from: Data(error!)))
            ?? RPCError(code: .internalError, message: "malformed error object", reason: "malformedError")
        return RPCResponse(id: id, outcome: .failure(decoded))
    }
}
