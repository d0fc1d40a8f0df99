import IAPProtocol
import JSONRPC

/// A retention message as Retention Messaging's Upload Message takes it (`UploadMessageRequestBody`): header (at most 66
/// characters), body (144), an optional full-size image with its alt text (150), up to 5 bullet points.
public struct RetentionMessageUpload: Codable, Sendable, Equatable {
    public struct Image: Codable, Sendable, Equatable {
        public var imageIdentifier: String
        public var altText: String
        public init(imageIdentifier: String, altText: String) {
            self.imageIdentifier = imageIdentifier
            self.altText = altText
        }
    }
    public struct BulletPoint: Codable, Sendable, Equatable {
        public var text: String
        public var imageIdentifier: String
        public var altText: String
        public init(text: String, imageIdentifier: String, altText: String) {
            self.text = text
            self.imageIdentifier = imageIdentifier
            self.altText = altText
        }
    }
    public var header: String
    public var body: String
    public var image: Image?
    /// `ABOVE_BODY` or `ABOVE_IMAGE`.
    public var headerPosition: String?
    public var bulletPoints: [BulletPoint]?
    public init(header: String, body: String, image: Image? = nil, headerPosition: String? = nil, bulletPoints: [BulletPoint]? = nil) {
        self.header = header
        self.body = body
        self.image = image
        self.headerPosition = headerPosition
        self.bulletPoints = bulletPoints
    }
}

/// A message's or an image's identifier and Apple's review state (`PENDING`, `APPROVED`, `REJECTED`); images also their size.
public struct RetentionAsset: Sendable, Equatable {
    public var identifier: String
    public var state: String
    public var imageSize: String?
    public init(identifier: String, state: String, imageSize: String? = nil) {
        self.identifier = identifier
        self.state = state
        self.imageSize = imageSize
    }
}

/// Apple's Retention Messaging API, under `/inApps/v1/messaging/` of the App Store Server API hosts, with the same key and
/// token: images, messages, default messages, the realtime URL and the Sandbox performance test. Errors are Apple's
/// (`AppStoreAPIError.api` with its `errorCode`, e.g. 4030017 when a default message is not approved).
extension AppStoreServerAPIClient {
    func messaging(_ environment: AppleEnvironment, _ path: String) -> String { base(environment) + "/inApps/v1/messaging/" + path }

    /// Upload Image: a PNG without transparency (`FULL_SIZE`: 3840 wide, 160-2160 high; or `BULLET_POINT`).
    public func uploadImage(_ environment: AppleEnvironment, imageIdentifier: String, png: [UInt8], imageSize: String = "FULL_SIZE") async throws {
        _ = try await send(
            .PUT, messaging(environment, "image/" + Self.escaped(imageIdentifier)) + "?imageSize=" + Self.escaped(imageSize),
            raw: (png, "image/png"))
    }

    public func deleteImage(_ environment: AppleEnvironment, imageIdentifier: String) async throws {
        _ = try await send(.DELETE, messaging(environment, "image/" + Self.escaped(imageIdentifier)))
    }

    public func imageList(_ environment: AppleEnvironment) async throws -> [RetentionAsset] {
        try await get(messaging(environment, "image/list"))["imageIdentifiers"]?.arrayValue?.map {
            RetentionAsset(
                identifier: $0["imageIdentifier"]?.stringValue ?? "", state: $0["imageState"]?.stringValue ?? "",
                imageSize: $0["imageSize"]?.stringValue)
        } ?? []
    }

    public func uploadMessage(_ environment: AppleEnvironment, messageIdentifier: String, message: RetentionMessageUpload) async throws {
        let body = try JSONValue(parsing: Array(try JSONByteEncoder.encode(message)))
        _ = try await send(.PUT, messaging(environment, "message/" + Self.escaped(messageIdentifier)), body: body)
    }

    public func deleteMessage(_ environment: AppleEnvironment, messageIdentifier: String) async throws {
        _ = try await send(.DELETE, messaging(environment, "message/" + Self.escaped(messageIdentifier)))
    }

    public func messageList(_ environment: AppleEnvironment) async throws -> [RetentionAsset] {
        try await get(messaging(environment, "message/list"))["messageIdentifiers"]?.arrayValue?.map {
            RetentionAsset(identifier: $0["messageIdentifier"]?.stringValue ?? "", state: $0["messageState"]?.stringValue ?? "")
        } ?? []
    }

    func defaultPath(_ productId: String, _ locale: String) -> String { "default/" + Self.escaped(productId) + "/" + Self.escaped(locale) }

    /// Configure Default Message: an approved message (with approved images) shown for the product and locale when the
    /// app's endpoint chooses nothing or fails.
    public func configureDefaultMessage(_ environment: AppleEnvironment, productId: String, locale: String, messageIdentifier: String)
        async throws
    {
        _ = try await send(
            .PUT, messaging(environment, defaultPath(productId, locale)), body: .object(["messageIdentifier": .string(messageIdentifier)]))
    }

    public func defaultMessage(_ environment: AppleEnvironment, productId: String, locale: String) async throws -> String {
        guard let id = try await get(messaging(environment, defaultPath(productId, locale)))["messageIdentifier"]?.stringValue else {
            throw AppStoreAPIError.malformedResponse
        }
        return id
    }

    public func deleteDefaultMessage(_ environment: AppleEnvironment, productId: String, locale: String) async throws {
        _ = try await send(.DELETE, messaging(environment, defaultPath(productId, locale)))
    }

    /// Configure Realtime URL: where Apple sends this environment's Get Retention Message requests (https, at most 256
    /// characters; Production only after a passed performance test).
    public func configureRealtimeURL(_ environment: AppleEnvironment, url: String) async throws {
        _ = try await send(.PUT, messaging(environment, "realtime/url"), body: .object(["realtimeURL": .string(url)]))
    }

    public func realtimeURL(_ environment: AppleEnvironment) async throws -> String {
        guard let url = try await get(messaging(environment, "realtime/url"))["realtimeURL"]?.stringValue else {
            throw AppStoreAPIError.malformedResponse
        }
        return url
    }

    public func deleteRealtimeURL(_ environment: AppleEnvironment) async throws {
        _ = try await send(.DELETE, messaging(environment, "realtime/url"))
    }

    /// Initiate Performance Test (Sandbox): Apple sends the Sandbox realtime URL a burst of requests for a Sandbox
    /// subscription. Answers the test's `requestId` and Apple's configuration (`PerformanceTestConfig`).
    public func initiatePerformanceTest(originalTransactionId: String) async throws -> (requestId: String, config: JSONValue) {
        let answer = try await send(
            .POST, messaging(.sandbox, "performanceTest"), body: .object(["originalTransactionId": .string(originalTransactionId)]))
        guard let id = answer?["requestId"]?.stringValue, let config = answer?["config"] else { throw AppStoreAPIError.malformedResponse }
        return (id, config)
    }

    /// Get Performance Test Results: Apple's `PerformanceTestResultResponse` (`result` PENDING, PASS or FAIL, `successRate`,
    /// `responseTimes`, `failures`).
    public func performanceTestResult(requestId: String) async throws -> JSONValue {
        try await get(messaging(.sandbox, "performanceTest/result/" + Self.escaped(requestId)))
    }
}
