import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Hummingbird's request context plus the TCP peer (sign-in limits per address, the audit log).
public struct ConsoleRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    var address: String? { remoteAddress?.ipAddress }
}

/// The mechanics of pages: forms, cookies, and the headers every answer carries.
enum ConsoleHTTP {
    /// No scripts, no other origins, no framing; styles only from the console's own stylesheet.
    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func headers(contentType: String) -> HTTPFields {
        [
            .contentType: contentType, .contentSecurityPolicy: contentSecurityPolicy, .xContentTypeOptions: "nosniff",
            .referrerPolicy: "no-referrer", .cacheControl: "no-store", .xFrameOptions: "DENY",
        ]
    }

    static func html(_ status: HTTPResponse.Status = .ok, _ text: String, setCookies: [String] = []) -> Response {
        var headers = headers(contentType: "text/html; charset=utf-8")
        for cookie in setCookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String, setCookies: [String] = []) -> Response {
        var headers = headers(contentType: "text/plain; charset=utf-8")
        headers[.location] = location
        for cookie in setCookies { headers.append(HTTPField(name: .setCookie, value: cookie)) }
        return Response(status: .seeOther, headers: headers)
    }

    /// The value of one cookie of the request.
    static func cookie(_ name: String, in request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let kv = pair.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
                if kv.count == 2, kv[0] == name { return String(kv[1]) }
            }
        }
        return nil
    }

    /// An `application/x-www-form-urlencoded` body, at most `maxBytes`; the first value of each name.
    static func form(_ request: Request, maxBytes: Int) async throws -> [String: String] {
        let body = try await request.body.collect(upTo: maxBytes)
        return parse(String(buffer: body))
    }

    static func parse(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String? { s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let name = decode(kv[0]), out[name] == nil else { continue }
            out[name] = kv.count == 2 ? decode(kv[1]) ?? "" : ""
        }
        return out
    }
}

extension HTTPField.Name {
    static let contentSecurityPolicy = Self("Content-Security-Policy")!
    static let xContentTypeOptions = Self("X-Content-Type-Options")!
    static let referrerPolicy = Self("Referrer-Policy")!
    static let xFrameOptions = Self("X-Frame-Options")!
}
