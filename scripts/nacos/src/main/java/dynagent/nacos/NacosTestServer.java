package dynagent.nacos;

import com.alibaba.nacos.NacosServerBasicApplication;
import com.alibaba.nacos.NacosServerWebApplication;
import com.alibaba.nacos.console.NacosConsole;
import com.alibaba.nacos.core.listener.startup.NacosStartUp;
import com.alibaba.nacos.core.listener.startup.NacosStartUpManager;
import com.alibaba.nacos.sys.env.Constants;
import com.alibaba.nacos.sys.env.DeploymentType;
import com.alibaba.nacos.sys.env.EnvUtil;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.jmx.export.MBeanExporter;
import org.springframework.jmx.support.RegistrationPolicy;

/**
 * Minimal stand-in for upstream's com.alibaba.nacos.bootstrap.NacosBootstrap (not published
 * to Maven Central): starts the core context, then the server web context, then, in "merged"
 * mode, the console context. Used only by scripts/nacos.sh to run a local test server.
 */
public final class NacosTestServer {

    private NacosTestServer() {
    }

    public static void main(String[] args) {
        try {
            String type = System.getProperty(Constants.NACOS_DEPLOYMENT_TYPE,
                    Constants.NACOS_DEPLOYMENT_TYPE_SERVER);
            DeploymentType deploymentType = DeploymentType.getType(type);
            if (deploymentType != DeploymentType.SERVER && deploymentType != DeploymentType.MERGED) {
                throw new IllegalArgumentException("unsupported nacos.deployment.type " + type
                        + " (use server or merged)");
            }
            EnvUtil.setDeploymentType(deploymentType);

            NacosStartUpManager.start(NacosStartUp.CORE_START_UP_PHASE);
            ConfigurableApplicationContext core = new SpringApplicationBuilder(NacosServerBasicApplication.class)
                    .web(WebApplicationType.NONE).run(args);
            if (core.getEnvironment().getProperty("spring.jmx.enabled", Boolean.class, false)) {
                core.getBean(MBeanExporter.class).setRegistrationPolicy(RegistrationPolicy.IGNORE_EXISTING);
            }

            NacosStartUpManager.start(NacosStartUp.WEB_START_UP_PHASE);
            new SpringApplicationBuilder(NacosServerWebApplication.class).parent(core).run(args);

            if (deploymentType == DeploymentType.MERGED) {
                NacosStartUpManager.start(NacosStartUp.CONSOLE_START_UP_PHASE);
                new SpringApplicationBuilder(NacosConsole.class).parent(core).run(args);
            }
            System.out.println("NACOS_TEST_SERVER_STARTED");
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.println("NACOS_TEST_SERVER_FAILED: " + t);
            System.exit(1);
        }
    }
}
