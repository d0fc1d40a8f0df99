import Foundation

/// Decoding of params and results with the wire settings, turning `DecodingError`s into
/// `-32602 Invalid params` errors that name the offending field.
public enum RPCCodec {
    // JSONDecoder is immutable once configured and documented thread-safe for decoding.
    public static let decoder = JSONDecoder()
    private static let emptyObject = Data("{}".utf8)
    private static let emptyObjectBytes = Array("{}".utf8)

    /// Decodes method params; absent params decode as `{}`.
    public static func decodeParams<P: Decodable>(_ type: P.Type, from bytes: [UInt8]?) throws(RPCError) -> P {
        // Methods without params (ping, discover, health) skip the decoder; the envelope parser has
        // already checked that params, when present, are an object or an array.
        if P.self == EmptyParams.self, bytes == nil || bytes?.first == UInt8(ascii: "{") {
            return EmptyParams() as! P
        }
        if let quick = quickly(P.self, from: bytes ?? emptyObjectBytes) { return quick }
        do {
            return try decoder.decode(P.self, from: bytes.map { Data($0) } ?? emptyObject)
        } catch let error as DecodingError {
            if case .dataCorrupted(let ctx) = error, ctx.codingPath.isEmpty, let bytes,
                let field = firstNonIntegerNumber(in: bytes)
            {
                // Linux Foundation reports an integer field given 1.5 or 1e30 as "not valid JSON"
                // with no path; the envelope parser already proved the JSON valid, and the protocol
                // has no floating-point params, so the first such number is the culprit.
                throw RPCError.invalidParams("\(field): expected an integer", field: field, reason: "wrongType")
            }
            throw describe(error)
        } catch {
            throw RPCError.invalidParams("\(error)")
        }
    }

    /// The dotted path of the first number in `bytes` that is not a whole Int64 (fraction, exponent, overflow).
    static func firstNonIntegerNumber(in bytes: [UInt8]) -> String? {
        guard let value = try? JSONValue(parsing: bytes) else { return nil }
        func walk(_ v: JSONValue, _ path: String) -> String? {
            switch v {
            case .double: return path
            case .object(let o):
                for key in o.keys.sorted() {
                    if let found = walk(o[key]!, path.isEmpty ? key : path + "." + key) { return found }
                }
                return nil
            case .array(let a):
                for (i, item) in a.enumerated() { if let found = walk(item, path + "[\(i)]") { return found } }
                return nil
            default: return nil
            }
        }
        return walk(value, "")
    }

    /// Decodes any JSON body; failures become `internalError` with reason `malformedResponse`
    /// (a peer answered with something that does not match the contract).
    public static func decodeResult<R: Decodable>(_ type: R.Type, from bytes: [UInt8]) throws(RPCError) -> R {
        if let quick = quickly(R.self, from: bytes) { return quick }
        do {
            return try decoder.decode(R.self, from: Data(bytes))
        } catch {
            let described = (error as? DecodingError).map(describe) ?? RPCError.internalError("\(error)")
            throw RPCError(
                code: .internalError, message: "reply does not match the contract: \(described.message)",
                reason: "malformedResponse", retryable: false)
        }
    }

    /// The value `decoder` would give, without it when `JSONTreeDecoder` is sure; nil sends the caller to
    /// `decoder` (which also words every error).
    static func quickly<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) -> T? {
        // Repeated keys are left to `decoder` (both keep the first, but which one stands is not a promise).
        guard let tree = try? JSONValue(parsing: bytes, refusingRepeatedKeys: true) else { return nil }
        return try? JSONTreeDecoder.decode(T.self, from: tree)
    }

    /// A readable, typed error for a params decoding failure, e.g.
    /// `Invalid params: params.amount: expected an integer` with `data.field = "amount"`.
    public static func describe(_ error: DecodingError) -> RPCError {
        func path(_ keys: [any CodingKey]) -> String {
            keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
                .reduce("") { acc, k in k.hasPrefix("[") || acc.isEmpty ? acc + k : acc + "." + k }
        }
        switch error {
        case let .keyNotFound(key, ctx):
            let field = path(ctx.codingPath + [key])
            return .invalidParams("missing required field \"\(field)\"", field: field, reason: "missingField")
        case let .typeMismatch(type, ctx):
            let field = path(ctx.codingPath)
            return .invalidParams(
                "\(field.isEmpty ? "params" : field): expected \(jsonTypeName(type))",
                field: field.isEmpty ? nil : field, reason: "wrongType")
        case let .valueNotFound(type, ctx):
            let field = path(ctx.codingPath)
            return .invalidParams(
                "\(field.isEmpty ? "params" : field): expected \(jsonTypeName(type)), found null",
                field: field.isEmpty ? nil : field, reason: "wrongType")
        case let .dataCorrupted(ctx):
            let field = path(ctx.codingPath)
            // Foundation reports numbers that do not fit (1.5 or 1e30 for an integer) this way,
            // with the useful part in the underlying error.
            let detail = ctx.underlyingError.map { "\(ctx.debugDescription) (\(describeUnderlying($0)))" } ?? ctx.debugDescription
            return .invalidParams(
                "\(field.isEmpty ? "params" : field): \(detail)",
                field: field.isEmpty ? nil : field, reason: "invalidValue")
        @unknown default:
            return .invalidParams("\(error)")
        }
    }

    private static func describeUnderlying(_ error: any Error) -> String {
        let text = "\(error)"
        if let range = text.range(of: "NSDebugDescription=") {
            return String(text[range.upperBound...].prefix { $0 != "}" && $0 != "," })
        }
        return text
    }

    private static func jsonTypeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Bool.Type: return "a boolean"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type, is UInt64.Type: return "an integer"
        case is Double.Type, is Float.Type: return "a number"
        default:
            let name = String(describing: type)
            if name.hasPrefix("Array") { return "an array" }
            if name.hasPrefix("Dictionary") { return "an object" }
            return "an object"
        }
    }
}
